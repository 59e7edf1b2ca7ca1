// SPDX-License-Identifier: MIT
#include "services/cuda/context.hpp"

#include <cctype>

#include "services/cuda/per_gpu.hpp"

namespace rdmx::core::cuda {

CUcontext primary_context(const DriverApi& api, int device) {
  // Retained once per GPU: every retain counts, and the contexts live as
  // long as the process anyway.
  static PerGpu<CUcontext> retained;
  return retained.get(device, "cuda context", [&] {
    const ErrorContext where{.op = "cuda context", .sizes = "gpu=" + std::to_string(device)};
    CUdevice handle = 0;
    check(api, api.cuDeviceGet(&handle, device), "cuDeviceGet", where);
    CUcontext context = nullptr;
    check(api, api.cuDevicePrimaryCtxRetain(&context, handle), "cuDevicePrimaryCtxRetain", where);
    return context;
  });
}

std::string bus_id_of(const DriverApi& api, int device) {
  CUdevice handle = 0;
  char text[32] = {};
  if (api.cuDeviceGet(&handle, device) != kSuccess ||
      api.cuDeviceGetPCIBusId(text, sizeof text - 1, handle) != kSuccess) {
    return {};
  }
  std::string id = text;
  for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return id;
}

int device_by_bus_id(const DriverApi& api, const std::string& bus_id) {
  int count = 0;
  if (api.cuDeviceGetCount(&count) != kSuccess) return -1;
  std::string wanted = bus_id;
  for (char& c : wanted) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (int i = 0; i < count; ++i) {
    if (bus_id_of(api, i) == wanted) return i;
  }
  return -1;
}

ContextScope::ContextScope(const DriverApi& api, CUcontext context) : api_(api) {
  api_.cuCtxGetCurrent(&saved_);
  if (saved_ != context) {
    switched_ = true;
    api_.cuCtxSetCurrent(context);
  }
}

ContextScope::~ContextScope() {
  if (switched_) api_.cuCtxSetCurrent(saved_);
}

}  // namespace rdmx::core::cuda
