// SPDX-License-Identifier: MIT
// The control overlay: which control connections a communicator makes at
// creation, and how its ranks exchange what each one publishes over them.
//
// Rank r connects to r +/- 2^k (mod N) for every 2^k < N: a circulant graph
// of degree at most 2 log2 N whose diameter is log2 N and which stays
// connected when fewer than its degree of ranks fail. A full mesh made
// N (N - 1) / 2 handshakes at creation: 32,640 at 256 ranks, and the
// handshakes, not the data path, set the creation time.
//
// The exchange is Bruck's all-gather on the same edges: in step k a rank
// sends to r - 2^k what it holds (ranks r .. r + 2^k - 1) and receives the
// same from r + 2^k, so log2 N steps give every rank every value, and no
// store serves N x N bytes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "bootstrap/net.hpp"
#include "services/wait.hpp"

namespace rdmx::membership {

// The overlay neighbours of `rank`, ascending, without `rank` itself.
std::vector<int> overlay_neighbours(int rank, int size);

// Bruck's all-gather as steps, without I/O: for the blocking exchange below
// and for the membership thread's (Membership::gather()). `index` is this
// rank's place among `size`.
class BruckSteps {
 public:
  // What one rank may publish: an address or a placement, with room to spare.
  static constexpr std::size_t kMaxEntryBytes = 4096;

  BruckSteps(int index, int size, std::string mine);
  bool done() const noexcept { return distance() >= size_; }
  std::uint32_t step() const noexcept { return step_; }
  // Whom this step's message goes to, and whom it comes from (indices).
  int send_to() const noexcept;
  int receive_from() const noexcept;
  // This step's message: the values this rank holds that the receiver lacks.
  std::vector<std::uint8_t> message() const;
  // Takes this step's message from receive_from() and goes to the next
  // step: "" when it held what it should, else what was wrong (and nothing
  // changes).
  std::string take(std::span<const std::uint8_t> message);
  // Every rank's value, by index; once done().
  std::vector<std::string> values() const;
  // The most bytes one step's message may take for `size` ranks.
  static std::size_t max_message_bytes(int size);

 private:
  long long distance() const noexcept { return 1ll << step_; }
  std::size_t count() const noexcept;

  int index_;
  int size_;
  std::uint32_t step_ = 0;
  std::vector<std::string> held_;  // held_[i] is index (index_ + i) mod size_
};

// Every rank's `mine`, indexed by rank, exchanged over `connections`
// (indexed by rank; every overlay neighbour's must be open and
// non-blocking). Bytes that follow the exchange on a connection stay
// unread. Throws Error naming the peer and step that failed or timed out.
std::vector<std::string> gather_over_overlay(std::span<const bootstrap::UniqueFd> connections, int rank, int size,
                                             const std::string& mine, core::Clock::time_point deadline);

}  // namespace rdmx::membership
