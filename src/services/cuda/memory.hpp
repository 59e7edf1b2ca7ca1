// SPDX-License-Identifier: MIT
// Device memory rdmx allocates for itself (a collective's scratch, a
// staging area for reductions), in the GPU's primary context, so that the
// application's allocations and contexts are left alone.
#pragma once

#include <cstddef>

#include "services/cuda/driver_api.hpp"

namespace rdmx::core::cuda {

class DeviceAllocation {
 public:
  DeviceAllocation() = default;
  // Throws Error(System) naming the size, and saying so when the GPU has no room.
  DeviceAllocation(std::size_t bytes, int device, const char* op);
  ~DeviceAllocation();
  DeviceAllocation(DeviceAllocation&& other) noexcept;
  DeviceAllocation& operator=(DeviceAllocation&& other) noexcept;
  DeviceAllocation(const DeviceAllocation&) = delete;
  DeviceAllocation& operator=(const DeviceAllocation&) = delete;

  void* get() const noexcept;
  std::size_t size() const noexcept { return size_; }
  int device() const noexcept { return device_; }

 private:
  void release() noexcept;
  CUdeviceptr pointer_ = 0;
  std::size_t size_ = 0;
  int device_ = -1;
};

}  // namespace rdmx::core::cuda
