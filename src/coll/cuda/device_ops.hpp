// SPDX-License-Identifier: MIT
// How a collective reduces its buffers when they are device memory on one
// GPU: in the kernels of reduce_kernels.cu, on a stream of the
// communicator's own (its copies are core::cuda::copy_memory's). Each call
// returns once its work is done on the GPU, because the engine tells peers
// that the bytes are there (or reuses a slot) right after it.
#pragma once

#include <cstddef>

#include "rdmx/comm.hpp"
#include "services/cuda/driver_api.hpp"
#include "services/cuda/memory.hpp"

namespace rdmx::coll {

class DeviceOps {
 public:
  // Throws Error when the driver or the GPU cannot be had.
  explicit DeviceOps(int device);
  ~DeviceOps();
  DeviceOps(const DeviceOps&) = delete;
  DeviceOps& operator=(const DeviceOps&) = delete;

  int device() const noexcept { return device_; }

  // dst = a (op) b over `count` elements of `type`, dst and a in device
  // memory; b too, unless `b_in_host_memory` (a received message), when it
  // is first copied to a staging buffer on the GPU.
  void reduce(void* dst, const void* a, const void* b, bool b_in_host_memory, std::size_t count, DataType type,
              ReduceOp op);
  // dst = dst / divisor (ReduceOp::Avg's last step).
  void divide(void* dst, std::size_t count, DataType type, int divisor);

 private:
  void finish(const char* op, std::size_t bytes);

  int device_;
  core::cuda::CUcontext context_ = nullptr;
  core::cuda::CUstream stream_ = nullptr;
  core::cuda::DeviceAllocation stage_;  // host operands of reductions, on the GPU
};

}  // namespace rdmx::coll
