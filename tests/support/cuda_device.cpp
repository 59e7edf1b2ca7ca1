// SPDX-License-Identifier: MIT
#include "support/cuda_device.hpp"

#include "rdmx/error.hpp"

namespace rdmx::test {

namespace cu = core::cuda;

const cu::DriverApi* cuda_for_test(std::string* why) {
  const cu::DriverLoad& load = cu::load_driver();
  if (load.api == nullptr) {
    *why = load.reason;
    return nullptr;
  }
  const cu::DriverApi& api = *load.api;
  cu::CUdevice device = 0;
  cu::CUcontext context = nullptr;
  cu::check(api, api.cuDeviceGet(&device, 0), "cuDeviceGet", {.op = "test setup"});
  cu::check(api, api.cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain", {.op = "test setup"});
  cu::check(api, api.cuCtxSetCurrent(context), "cuCtxSetCurrent", {.op = "test setup"});
  return &api;
}

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  std::string why;
  const cu::DriverApi* api = cuda_for_test(&why);
  if (api == nullptr) throw Error(ErrorCode::NotSupported, "no GPU: " + why, {.op = "DeviceBuffer"});
  cu::check(*api, api->cuMemAlloc_v2(&pointer_, bytes), "cuMemAlloc",
            {.op = "DeviceBuffer", .sizes = std::to_string(bytes) + " B"});
}

DeviceBuffer::~DeviceBuffer() {
  if (pointer_ != 0) cu::load_driver().api->cuMemFree_v2(pointer_);
}

void cuda_copy(void* dst, const void* src, std::size_t bytes) {
  const cu::DriverApi& api = cu::require_driver("cuda_copy");
  cu::check(api,
            api.cuMemcpy(static_cast<cu::CUdeviceptr>(reinterpret_cast<std::uintptr_t>(dst)),
                         static_cast<cu::CUdeviceptr>(reinterpret_cast<std::uintptr_t>(src)), bytes),
            "cuMemcpy", {.op = "cuda_copy", .sizes = std::to_string(bytes) + " B"});
}

}  // namespace rdmx::test
