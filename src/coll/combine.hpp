// SPDX-License-Identifier: MIT
// How one operation copies and combines its data: with the CPU (the SIMD
// kernels of reduce.cpp) when its buffers are host memory, through the GPU
// (DeviceOps) when they are device memory. The algorithms and the engine
// touch user and scratch buffers only through it; the engine's own slots
// are always host memory.
#pragma once

#include <cstddef>

#include "rdmx/comm.hpp"

namespace rdmx::coll {

class DeviceOps;

struct Combine {
  void (*host_reduce)(void* dst, const void* a, const void* b, std::size_t count) = nullptr;
  std::size_t elem = 1;
  DataType type = DataType::Uint8;
  ReduceOp op = ReduceOp::Sum;  // as the kernels apply it (Avg reduces as Sum)
  int avg_divisor = 0;          // non-zero: receives marked final are divided by it
  DeviceOps* device = nullptr;  // set when the buffers are device memory

  // dst = src (nothing when they are the same place; overlapping host
  // buffers are moved, as memmove does).
  void copy(void* dst, const void* src, std::size_t bytes) const;
  // dst = a (op) b over `count` elements, all three the operation's buffers.
  void reduce(void* dst, const void* a, const void* b, std::size_t count) const;
  // The same with b a message in the engine's (host) slots.
  void reduce_received(void* dst, const void* a, const void* message, std::size_t count) const;
  // A received message copied into the operation's buffer.
  void place_received(void* dst, const void* message, std::size_t bytes) const;
  // The avg division, when there is one.
  void finalize(void* dst, std::size_t count) const;
};

}  // namespace rdmx::coll
