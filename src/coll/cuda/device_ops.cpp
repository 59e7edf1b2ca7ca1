// SPDX-License-Identifier: MIT
#include "coll/cuda/device_ops.hpp"

#include <cstdint>
#include <string>

#include "coll/cuda/kernels.hpp"
#include "services/cuda/context.hpp"
#include "services/cuda/driver.hpp"

namespace rdmx::coll {
namespace cu = core::cuda;

namespace {
cu::CUdeviceptr address(const void* p) { return static_cast<cu::CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)); }
}  // namespace

DeviceOps::DeviceOps(int device) : device_(device) {
  const char* op = "collective on device memory";
  const cu::DriverApi& api = cu::require_driver(op);
  context_ = cu::primary_context(api, device);
  cu::ContextScope scope(api, context_);
  cu::check(api, api.cuStreamCreate(&stream_, cu::kStreamNonBlocking), "cuStreamCreate",
            {.op = op, .sizes = "gpu=" + std::to_string(device)});
}

DeviceOps::~DeviceOps() {
  if (const cu::DriverApi* api = cu::driver_if_loaded(); api != nullptr && stream_ != nullptr) {
    cu::ContextScope scope(*api, context_);
    api->cuStreamSynchronize(stream_);
    api->cuStreamDestroy_v2(stream_);
  }
}

void DeviceOps::reduce(void* dst, const void* a, const void* b, bool b_in_host_memory, std::size_t count, DataType type,
                       ReduceOp op) {
  if (count == 0) return;
  const char* name = "collective reduction in device memory";
  const cu::DriverApi& api = cu::require_driver(name);
  const std::size_t bytes = count * size_of(type);
  cu::ContextScope scope(api, context_);
  if (b_in_host_memory) {
    if (stage_.size() < bytes) stage_ = cu::DeviceAllocation(bytes, device_, name);
    cu::check(api, api.cuMemcpyAsync(address(stage_.get()), address(b), bytes, stream_), "cuMemcpyAsync",
              {.op = name, .sizes = std::to_string(bytes) + " B to gpu " + std::to_string(device_)});
    b = stage_.get();
  }
  cuda_reduce(dst, a, b, count, type, op, stream_);
  finish(name, bytes);
}

void DeviceOps::divide(void* dst, std::size_t count, DataType type, int divisor) {
  if (count == 0) return;
  const char* name = "collective average in device memory";
  const cu::DriverApi& api = cu::require_driver(name);
  cu::ContextScope scope(api, context_);
  cuda_divide(dst, count, type, divisor, stream_);
  finish(name, count * size_of(type));
}

void DeviceOps::finish(const char* op, std::size_t bytes) {
  const cu::DriverApi& api = cu::require_driver(op);
  cu::check(api, api.cuStreamSynchronize(stream_), "cuStreamSynchronize",
            {.op = op, .sizes = std::to_string(bytes) + " B on gpu " + std::to_string(device_)});
}

}  // namespace rdmx::coll
