// SPDX-License-Identifier: MIT
#include "core/cuda/context.hpp"

#include <array>
#include <atomic>
#include <cctype>

namespace rdmx::core::cuda {

CUcontext primary_context(const DriverApi& api, int device) {
  // Retained once per GPU: every retain counts, and the contexts live as
  // long as the process anyway.
  static std::array<std::atomic<CUcontext>, 64> retained{};
  const ErrorContext where{.op = "cuda context", .sizes = "gpu=" + std::to_string(device)};
  if (device < 0 || static_cast<std::size_t>(device) >= retained.size()) {
    throw Error(ErrorCode::NotSupported, "GPU ordinal out of the range rdmx supports", where);
  }
  auto& slot = retained[static_cast<std::size_t>(device)];
  if (CUcontext known = slot.load(std::memory_order_acquire); known != nullptr) return known;
  CUdevice handle = 0;
  check(api, api.cuDeviceGet(&handle, device), "cuDeviceGet", where);
  CUcontext context = nullptr;
  check(api, api.cuDevicePrimaryCtxRetain(&context, handle), "cuDevicePrimaryCtxRetain", where);
  CUcontext expected = nullptr;
  // A thread that lost the race drops its extra retain.
  if (!slot.compare_exchange_strong(expected, context, std::memory_order_acq_rel))
    api.cuDevicePrimaryCtxRelease_v2(handle);
  return slot.load(std::memory_order_acquire);
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
