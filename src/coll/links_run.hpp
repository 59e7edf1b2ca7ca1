// SPDX-License-Identifier: MIT
// The per-transfer state of one Links::run(), kept in Links so that an
// operation allocates nothing once its vectors have grown.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "coll/links.hpp"

namespace rdmx::coll {

struct SendState {
  std::size_t sent = 0;
  bool any = false;  // a message was posted (zero-byte transfers send one)
  bool any_in_place = false;
  std::uint32_t transfer = 0;
  std::uint64_t seq = 0;
};
struct RecvState {
  bool any = false;
  std::uint32_t transfer = 0;
  std::uint64_t seq = 0;
};

struct Links::RunScratch {
  std::vector<SendState> send_state;
  std::vector<RecvState> recv_state;
  std::vector<int> active;
  std::vector<std::size_t> send_pos, recv_pos;
};

}  // namespace rdmx::coll
