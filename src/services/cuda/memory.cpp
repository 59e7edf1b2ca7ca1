// SPDX-License-Identifier: MIT
#include "services/cuda/memory.hpp"

#include <cstdint>
#include <string>
#include <utility>

#include "services/cuda/context.hpp"
#include "services/cuda/driver.hpp"

namespace rdmx::core::cuda {

DeviceAllocation::DeviceAllocation(std::size_t bytes, int device, const char* op) : size_(bytes), device_(device) {
  const DriverApi& api = require_driver(op);
  const ErrorContext where{.op = op,
                           .sizes = std::to_string(bytes) + " B on gpu " + std::to_string(device),
                           .hint = "free device memory or use smaller buffers"};
  ContextScope scope(api, primary_context(api, device));
  const CUresult result = api.cuMemAlloc_v2(&pointer_, bytes == 0 ? 1 : bytes);
  if (result == kErrorOutOfMemory) {
    throw Error(ErrorCode::System, "the GPU has no room for rdmx's device buffer: " + describe(api, result), where);
  }
  check(api, result, "cuMemAlloc", where);
}

DeviceAllocation::~DeviceAllocation() { release(); }

DeviceAllocation::DeviceAllocation(DeviceAllocation&& other) noexcept
    : pointer_(std::exchange(other.pointer_, 0)),
      size_(std::exchange(other.size_, 0)),
      device_(std::exchange(other.device_, -1)) {}

DeviceAllocation& DeviceAllocation::operator=(DeviceAllocation&& other) noexcept {
  if (this != &other) {
    release();
    pointer_ = std::exchange(other.pointer_, 0);
    size_ = std::exchange(other.size_, 0);
    device_ = std::exchange(other.device_, -1);
  }
  return *this;
}

void* DeviceAllocation::get() const noexcept { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(pointer_)); }

void DeviceAllocation::release() noexcept {
  if (pointer_ == 0) return;
  // The driver stays loaded once it was (driver_if_loaded), so it is there to free with.
  if (const DriverApi* api = driver_if_loaded(); api != nullptr) {
    try {
      ContextScope scope(*api, primary_context(*api, device_));
      api->cuMemFree_v2(pointer_);
    } catch (...) {
      // The context could not be had (the process is tearing CUDA down): the memory goes with it.
    }
  }
  pointer_ = 0;
}

}  // namespace rdmx::core::cuda
