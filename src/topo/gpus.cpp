// SPDX-License-Identifier: MIT
// GPUs through the CUDA driver API, loaded with dlopen: rdmx must build and
// run where CUDA is absent, and the driver (libcuda.so.1) is what knows the
// GPUs; the toolkit may be installed without one, or the reverse.
#include <dlfcn.h>

#include <cstddef>
#include <cstring>

#include "topo/topo.hpp"

namespace rdmx::topo {
namespace {

// The few driver API entry points used, as cuda.h declares them (CUresult and
// CUdevice are ints). cuDeviceTotalMem is a macro for the _v2 symbol there.
using CuResult = int;
using CuDevice = int;
using CuInit = CuResult (*)(unsigned int flags);
using CuDeviceGetCount = CuResult (*)(int* count);
using CuDeviceGet = CuResult (*)(CuDevice* device, int ordinal);
using CuDeviceGetName = CuResult (*)(char* name, int length, CuDevice device);
using CuDeviceGetPciBusId = CuResult (*)(char* bus_id, int length, CuDevice device);
using CuDeviceTotalMem = CuResult (*)(std::size_t* bytes, CuDevice device);
using CuGetErrorName = CuResult (*)(CuResult error, const char** name);

template <typename Fn>
Fn symbol(void* library, const char* name) {
  return reinterpret_cast<Fn>(::dlsym(library, name));
}

std::string describe(CuResult result, CuGetErrorName error_name) {
  std::string text = "error " + std::to_string(result);
  const char* name = nullptr;
  if (error_name != nullptr && error_name(result, &name) == 0 && name != nullptr) {
    text += std::string(" (") + name + ")";
  }
  return text;
}

GpuScan scan() {
  GpuScan scan;
  // Never dlclose'd: after cuInit the driver keeps threads and state that
  // unloading under it would break.
  void* library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* error = ::dlerror();
    const std::string why = error != nullptr ? error : "unknown dlopen error";
    scan.note = why.find("No such file") != std::string::npos ? "no CUDA driver: libcuda.so.1 not found"
                                                              : "no CUDA driver: cannot load libcuda.so.1: " + why;
    return scan;
  }
  const auto init = symbol<CuInit>(library, "cuInit");
  const auto get_count = symbol<CuDeviceGetCount>(library, "cuDeviceGetCount");
  const auto get = symbol<CuDeviceGet>(library, "cuDeviceGet");
  const auto get_name = symbol<CuDeviceGetName>(library, "cuDeviceGetName");
  const auto get_bus_id = symbol<CuDeviceGetPciBusId>(library, "cuDeviceGetPCIBusId");
  const auto total_mem = symbol<CuDeviceTotalMem>(library, "cuDeviceTotalMem_v2");
  const auto error_name = symbol<CuGetErrorName>(library, "cuGetErrorName");
  if (init == nullptr || get_count == nullptr || get == nullptr || get_name == nullptr || get_bus_id == nullptr ||
      total_mem == nullptr) {
    scan.note = "libcuda.so.1 lacks a driver API entry point (cuInit, cuDeviceGet*, cuDeviceTotalMem_v2): too old?";
    return scan;
  }
  if (const CuResult result = init(0); result != 0) {
    scan.note = "cuInit failed: " + describe(result, error_name);
    return scan;
  }
  int count = 0;
  if (const CuResult result = get_count(&count); result != 0) {
    scan.note = "cuDeviceGetCount failed: " + describe(result, error_name);
    return scan;
  }
  if (count == 0) {
    scan.note = "the CUDA driver reports no GPU";
    return scan;
  }
  for (int i = 0; i < count; ++i) {
    CuDevice device = 0;
    if (get(&device, i) != 0) continue;
    Gpu gpu{.index = i};
    char text[256] = {};
    if (get_name(text, sizeof text - 1, device) == 0) gpu.name = text;
    std::memset(text, 0, sizeof text);
    if (get_bus_id(text, sizeof text - 1, device) == 0) gpu.pci_bus_id = text;
    std::size_t bytes = 0;
    if (total_mem(&bytes, device) == 0) gpu.memory_bytes = bytes;
    scan.gpus.push_back(std::move(gpu));
  }
  return scan;
}

}  // namespace

const GpuScan& scan_gpus() {
  static const GpuScan result = scan();
  return result;
}

}  // namespace rdmx::topo
