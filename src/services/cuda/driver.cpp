// SPDX-License-Identifier: MIT
#include "services/cuda/driver.hpp"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstring>
#include <utility>
#include <vector>

#include "services/log.hpp"

namespace rdmx::core::cuda {
namespace {

constexpr const char* kLibrary = "libcuda.so.1";

// Symbols rdmx needs, and where each goes. Every one has been in the driver
// since CUDA 11.0 except cuMemGetHandleForAddressRange (11.7), which is
// optional: without it GPUDirect RDMA through dma-buf is off.
std::vector<std::pair<const char*, void**>> symbol_table(DriverApi& a) {
  auto slot = [](auto& fn) { return reinterpret_cast<void**>(&fn); };
  return {
      {"cuGetErrorName", slot(a.cuGetErrorName)},
      {"cuGetErrorString", slot(a.cuGetErrorString)},
      {"cuInit", slot(a.cuInit)},
      {"cuDriverGetVersion", slot(a.cuDriverGetVersion)},
      {"cuDeviceGetCount", slot(a.cuDeviceGetCount)},
      {"cuDeviceGet", slot(a.cuDeviceGet)},
      {"cuDeviceGetName", slot(a.cuDeviceGetName)},
      {"cuDeviceGetPCIBusId", slot(a.cuDeviceGetPCIBusId)},
      {"cuDeviceTotalMem_v2", slot(a.cuDeviceTotalMem_v2)},
      {"cuDeviceGetAttribute", slot(a.cuDeviceGetAttribute)},
      {"cuDevicePrimaryCtxRetain", slot(a.cuDevicePrimaryCtxRetain)},
      {"cuDevicePrimaryCtxRelease_v2", slot(a.cuDevicePrimaryCtxRelease_v2)},
      {"cuCtxGetCurrent", slot(a.cuCtxGetCurrent)},
      {"cuCtxSetCurrent", slot(a.cuCtxSetCurrent)},
      {"cuCtxSynchronize", slot(a.cuCtxSynchronize)},
      {"cuPointerGetAttributes", slot(a.cuPointerGetAttributes)},
      {"cuMemGetAddressRange_v2", slot(a.cuMemGetAddressRange_v2)},
      {"cuMemAlloc_v2", slot(a.cuMemAlloc_v2)},
      {"cuMemFree_v2", slot(a.cuMemFree_v2)},
      {"cuMemAllocHost_v2", slot(a.cuMemAllocHost_v2)},
      {"cuMemFreeHost", slot(a.cuMemFreeHost)},
      {"cuMemHostRegister_v2", slot(a.cuMemHostRegister_v2)},
      {"cuMemHostUnregister", slot(a.cuMemHostUnregister)},
      {"cuMemcpy", slot(a.cuMemcpy)},
      {"cuMemcpyAsync", slot(a.cuMemcpyAsync)},
      {"cuMemsetD8_v2", slot(a.cuMemsetD8_v2)},
      {"cuStreamCreate", slot(a.cuStreamCreate)},
      {"cuStreamDestroy_v2", slot(a.cuStreamDestroy_v2)},
      {"cuStreamSynchronize", slot(a.cuStreamSynchronize)},
      {"cuStreamWaitEvent", slot(a.cuStreamWaitEvent)},
      {"cuEventCreate", slot(a.cuEventCreate)},
      {"cuEventDestroy_v2", slot(a.cuEventDestroy_v2)},
      {"cuEventRecord", slot(a.cuEventRecord)},
      {"cuEventQuery", slot(a.cuEventQuery)},
      {"cuEventSynchronize", slot(a.cuEventSynchronize)},
      {"cuStreamWaitValue32_v2", slot(a.cuStreamWaitValue32_v2)},
      {"cuMemHostGetDevicePointer_v2", slot(a.cuMemHostGetDevicePointer_v2)},
      {"cuModuleLoadData", slot(a.cuModuleLoadData)},
      {"cuModuleGetFunction", slot(a.cuModuleGetFunction)},
      {"cuLaunchKernel", slot(a.cuLaunchKernel)},
      {"cuIpcGetMemHandle", slot(a.cuIpcGetMemHandle)},
      {"cuIpcOpenMemHandle_v2", slot(a.cuIpcOpenMemHandle_v2)},
      {"cuIpcCloseMemHandle", slot(a.cuIpcCloseMemHandle)},
      {"cuMemCreate", slot(a.cuMemCreate)},
      {"cuMemRelease", slot(a.cuMemRelease)},
      {"cuMemAddressReserve", slot(a.cuMemAddressReserve)},
      {"cuMemAddressFree", slot(a.cuMemAddressFree)},
      {"cuMemMap", slot(a.cuMemMap)},
      {"cuMemUnmap", slot(a.cuMemUnmap)},
      {"cuMemSetAccess", slot(a.cuMemSetAccess)},
      {"cuMemGetAllocationGranularity", slot(a.cuMemGetAllocationGranularity)},
      {"cuMemRetainAllocationHandle", slot(a.cuMemRetainAllocationHandle)},
      {"cuMemGetAllocationPropertiesFromHandle", slot(a.cuMemGetAllocationPropertiesFromHandle)},
      {"cuMemExportToShareableHandle", slot(a.cuMemExportToShareableHandle)},
      {"cuMemImportFromShareableHandle", slot(a.cuMemImportFromShareableHandle)},
  };
}

DriverLoad load() {
  DriverLoad load;
  // Never dlclose'd: after cuInit the driver keeps threads and state that
  // unloading under it would break.
  void* library = ::dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* error = ::dlerror();
    const std::string why = error != nullptr ? error : "unknown dlopen error";
    load.reason = why.find("No such file") != std::string::npos ? "no CUDA driver: libcuda.so.1 not found"
                                                                : "no CUDA driver: cannot load libcuda.so.1: " + why;
    return load;
  }
  static DriverApi api{};
  for (auto [name, slot] : symbol_table(api)) {
    *slot = ::dlsym(library, name);
    if (*slot == nullptr) {
      load.reason = std::string("libcuda.so.1 lacks ") + name + ": a driver older than CUDA 11.0?";
      return load;
    }
  }
  api.cuMemGetHandleForAddressRange =
      reinterpret_cast<decltype(api.cuMemGetHandleForAddressRange)>(::dlsym(library, "cuMemGetHandleForAddressRange"));
  if (const CUresult result = api.cuInit(0); result != kSuccess) {
    load.reason = "cuInit failed: " + describe(api, result);
    return load;
  }
  if (const CUresult result = api.cuDriverGetVersion(&load.version); result != kSuccess) {
    load.reason = "cuDriverGetVersion failed: " + describe(api, result);
    return load;
  }
  if (const CUresult result = api.cuDeviceGetCount(&load.devices); result != kSuccess) {
    load.reason = "cuDeviceGetCount failed: " + describe(api, result);
    return load;
  }
  if (load.devices == 0) {
    load.reason = "the CUDA driver reports no GPU";
    return load;
  }
  load.api = &api;
  load.reason = "CUDA driver " + std::to_string(load.version / 1000) + "." + std::to_string(load.version % 1000 / 10) +
                " with " + std::to_string(load.devices) + (load.devices == 1 ? " GPU" : " GPUs");
  RDMX_INFO("cuda: %s", load.reason.c_str());
  return load;
}

}  // namespace

const DriverLoad& load_driver() {
  static const DriverLoad result = load();
  return result;
}

namespace {

// One look at the loaded objects: the loader's count of objects ever
// loaded (dlpi_adds, the same in every entry), and whether libcuda is
// among them. When the count equals `known_adds` nothing was loaded since
// the last look, and the walk stops at the first entry.
struct ObjectScan {
  unsigned long long known_adds = 0;
  unsigned long long adds = 0;
  bool first = true;
  bool unchanged = false;
  bool found = false;
};

int scan_object(dl_phdr_info* info, std::size_t /*size*/, void* data) {
  auto* scan = static_cast<ObjectScan*>(data);
  if (scan->first) {
    scan->first = false;
    scan->adds = info->dlpi_adds;
    if (scan->adds == scan->known_adds) {
      scan->unchanged = true;
      return 1;
    }
  }
  const char* name = info->dlpi_name != nullptr ? info->dlpi_name : "";
  const char* slash = std::strrchr(name, '/');
  const char* base = slash != nullptr ? slash + 1 : name;
  if (std::strncmp(base, "libcuda.so", 10) == 0) {
    scan->found = true;
    return 1;
  }
  return 0;
}

}  // namespace

const DriverApi* driver_if_loaded() {
  // Asked at every registration, so it must cost next to nothing where CUDA
  // is absent: dlopen(RTLD_NOLOAD) searches the library path each time,
  // while a walk of the loaded objects that stops at once when none was
  // added since is one lock and one callback (docs/journal/PERFORMANCE-HISTORY.md,
  // "CUDA detection"). Once seen, the driver stays (it is never unloaded).
  static std::atomic<bool> present{false};
  static std::atomic<unsigned long long> known_adds{~0ull};
  if (!present.load(std::memory_order_acquire)) {
    ObjectScan scan{.known_adds = known_adds.load(std::memory_order_relaxed)};
    ::dl_iterate_phdr(scan_object, &scan);
    if (scan.unchanged) return nullptr;
    known_adds.store(scan.adds, std::memory_order_relaxed);
    if (!scan.found) return nullptr;
    present.store(true, std::memory_order_release);
  }
  return load_driver().api;
}

std::string describe(const DriverApi& api, CUresult result) {
  std::string text = "error " + std::to_string(result);
  const char* name = nullptr;
  const char* meaning = nullptr;
  if (api.cuGetErrorName != nullptr && api.cuGetErrorName(result, &name) == kSuccess && name != nullptr) {
    text = name;
    if (api.cuGetErrorString != nullptr && api.cuGetErrorString(result, &meaning) == kSuccess && meaning != nullptr) {
      text += std::string(" (") + meaning + ")";
    }
  }
  return text;
}

void check(const DriverApi& api, CUresult result, const char* call, const ErrorContext& where) {
  if (result == kSuccess) return;
  ErrorContext context = where;
  if (context.hint.empty())
    context.hint = "the CUDA driver refused the call; RDMX_DEBUG=INFO shows the driver and GPUs";
  throw Error(ErrorCode::System, std::string(call) + " failed: " + describe(api, result), std::move(context));
}

const DriverApi& require_driver(const char* op) {
  const DriverLoad& load = load_driver();
  if (load.api == nullptr) {
    throw Error(ErrorCode::NotSupported, "CUDA is not available: " + load.reason,
                {.op = op, .hint = "run on a host with an NVIDIA GPU and driver; `rdmx info` shows what was found"});
  }
  return *load.api;
}

}  // namespace rdmx::core::cuda
