// SPDX-License-Identifier: MIT
// What every message of an operation carries so that ranks which called
// different things find out instead of exchanging garbage.
#pragma once

#include <cstdint>
#include <string>

#include "rdmx/comm.hpp"

namespace rdmx::coll {

enum class Algo : std::uint8_t {
  None,
  Ring,
  RecursiveDoubling,
  HalvingDoubling,
  Tree,
  Direct,
  Dissemination,
  Local,
  Hierarchical
};
// "ring", "rd", "hd", ...: the name of the algorithm's registry row (algo_registry.cpp).
const char* to_string(Algo algo) noexcept;

struct OpDesc {
  std::uint64_t seq = 0;  // collective sequence number; for point to point, the pair's send number
  CollOp op = CollOp::Barrier;
  DataType type = DataType::Uint8;
  ReduceOp redop = ReduceOp::Sum;
  Algo algo = Algo::None;
  std::int32_t root = -1;
  std::uint64_t count = 0;
  bool p2p() const noexcept { return op == CollOp::Send || op == CollOp::Recv || op == CollOp::SendRecv; }
};

// Operations whose reduction is part of the call (and so must match).
inline bool needs_redop(CollOp op) noexcept {
  return op == CollOp::AllReduce || op == CollOp::ReduceScatter || op == CollOp::Reduce;
}

// "all_reduce #5 (fp32 x 1024, sum, ring)", "broadcast #2 (int8 x 7, root 1, tree)", "send #3 (fp32 x 4)".
std::string describe(const OpDesc& desc);

}  // namespace rdmx::coll
