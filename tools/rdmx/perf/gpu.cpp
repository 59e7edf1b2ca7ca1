// SPDX-License-Identifier: MIT
#include "perf/gpu.hpp"

#include <dlfcn.h>

#include <cstdint>
#include <utility>

#include "rdmx/error.hpp"
#include "rdmx/info.hpp"

namespace rdmx::cli::gpu {
namespace {

// cuda.h's declarations of the few calls used here (CUresult is an int,
// CUdeviceptr a 64-bit integer, contexts and streams opaque pointers).
using CUdeviceptr = unsigned long long;
struct Driver {
  int (*cuGetErrorName)(int, const char**);
  int (*cuDeviceGetCount)(int*);
  int (*cuDeviceGet)(int*, int);
  int (*cuDeviceGetName)(char*, int, int);
  int (*cuDevicePrimaryCtxRetain)(void**, int);
  int (*cuCtxSetCurrent)(void*);
  int (*cuCtxSynchronize)();
  int (*cuMemAlloc_v2)(CUdeviceptr*, std::size_t);
  int (*cuMemFree_v2)(CUdeviceptr);
  int (*cuMemcpy)(CUdeviceptr, CUdeviceptr, std::size_t);
  int (*cuMemsetD8_v2)(CUdeviceptr, unsigned char, std::size_t);
  int (*cuStreamCreate)(void**, unsigned);
  int (*cuStreamDestroy_v2)(void*);
  int (*cuMemcpyAsync)(CUdeviceptr, CUdeviceptr, std::size_t, void*);
  int (*cuStreamSynchronize)(void*);
};
constexpr unsigned kStreamNonBlocking = 1;

Driver driver;

CUdeviceptr device_pointer(const void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)); }

// rdmx's probe has loaded and initialised the driver (cuInit) already; this
// resolves the calls the tools make from the same library.
void resolve(const std::string& op) {
  void* library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  const std::pair<const char*, void**> symbols[] = {
      {"cuGetErrorName", reinterpret_cast<void**>(&driver.cuGetErrorName)},
      {"cuDeviceGetCount", reinterpret_cast<void**>(&driver.cuDeviceGetCount)},
      {"cuDeviceGet", reinterpret_cast<void**>(&driver.cuDeviceGet)},
      {"cuDeviceGetName", reinterpret_cast<void**>(&driver.cuDeviceGetName)},
      {"cuDevicePrimaryCtxRetain", reinterpret_cast<void**>(&driver.cuDevicePrimaryCtxRetain)},
      {"cuCtxSetCurrent", reinterpret_cast<void**>(&driver.cuCtxSetCurrent)},
      {"cuCtxSynchronize", reinterpret_cast<void**>(&driver.cuCtxSynchronize)},
      {"cuMemAlloc_v2", reinterpret_cast<void**>(&driver.cuMemAlloc_v2)},
      {"cuMemFree_v2", reinterpret_cast<void**>(&driver.cuMemFree_v2)},
      {"cuMemcpy", reinterpret_cast<void**>(&driver.cuMemcpy)},
      {"cuMemsetD8_v2", reinterpret_cast<void**>(&driver.cuMemsetD8_v2)},
      {"cuStreamCreate", reinterpret_cast<void**>(&driver.cuStreamCreate)},
      {"cuStreamDestroy_v2", reinterpret_cast<void**>(&driver.cuStreamDestroy_v2)},
      {"cuMemcpyAsync", reinterpret_cast<void**>(&driver.cuMemcpyAsync)},
      {"cuStreamSynchronize", reinterpret_cast<void**>(&driver.cuStreamSynchronize)},
  };
  for (auto [name, slot] : symbols) {
    *slot = library != nullptr ? ::dlsym(library, name) : nullptr;
    if (*slot == nullptr) {
      throw Error(ErrorCode::NotSupported, op + ": libcuda.so.1 lacks " + name, {.op = op});
    }
  }
}

}  // namespace

Gpu& Gpu::open(int requested, int local_rank, const char* op) {
  static Gpu gpu;
  if (gpu.ordinal_ >= 0) return gpu;
  gpu.op_ = op;
  const CudaStatus status = probe_cuda();
  if (!status.usable) {
    throw Error(
        ErrorCode::NotSupported, gpu.op_ + ": no usable GPU: " + status.reason,
        {.op = gpu.op_, .hint = "run it on a host with a GPU and its CUDA driver (rdmx info says what it finds)"});
  }
  resolve(gpu.op_);
  gpu.check(driver.cuDeviceGetCount(&gpu.count_), "cuDeviceGetCount");
  const int ordinal = requested >= 0 ? requested : (local_rank < 0 ? 0 : local_rank) % gpu.count_;
  if (ordinal >= gpu.count_) {
    throw Error(ErrorCode::InvalidArgument,
                "--gpu " + std::to_string(ordinal) + ": the driver has " + std::to_string(gpu.count_) +
                    (gpu.count_ == 1 ? " GPU" : " GPUs"),
                {.op = gpu.op_, .hint = "pick a GPU below " + std::to_string(gpu.count_) + " (rdmx info lists them)"});
  }
  int device = 0;
  void* context = nullptr;
  gpu.check(driver.cuDeviceGet(&device, ordinal), "cuDeviceGet");
  gpu.check(driver.cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
  gpu.check(driver.cuCtxSetCurrent(context), "cuCtxSetCurrent");
  char name[256] = {};
  gpu.check(driver.cuDeviceGetName(name, sizeof name - 1, device), "cuDeviceGetName");
  gpu.name_ = name;
  gpu.ordinal_ = ordinal;
  return gpu;
}

void Gpu::check(int result, const char* call, std::size_t bytes) const {
  if (result == 0) return;
  const char* name = nullptr;
  if (driver.cuGetErrorName == nullptr || driver.cuGetErrorName(result, &name) != 0 || name == nullptr) {
    name = "an unknown CUresult";
  }
  throw Error(ErrorCode::System,
              std::string(call) + " failed: " + name + " (" + std::to_string(result) + ")" +
                  (ordinal_ >= 0 ? " on GPU " + std::to_string(ordinal_) : std::string()),
              {.op = op_,
               .sizes = bytes != 0 ? std::to_string(bytes) + " B" : std::string(),
               .hint = "rdmx info shows the GPUs and the driver; nvidia-smi shows their memory"});
}

void* Gpu::allocate(std::size_t bytes) {
  CUdeviceptr pointer = 0;
  check(driver.cuMemAlloc_v2(&pointer, bytes), "cuMemAlloc", bytes);
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(pointer));
}

void Gpu::free(void* pointer) noexcept {
  if (pointer != nullptr) driver.cuMemFree_v2(device_pointer(pointer));
}

void Gpu::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  check(driver.cuMemcpy(device_pointer(dst), device_pointer(src), bytes), "cuMemcpy", bytes);
  check(driver.cuCtxSynchronize(), "cuCtxSynchronize after cuMemcpy", bytes);
}

void Gpu::set(void* dst, std::uint8_t value, std::size_t bytes) {
  if (bytes == 0) return;
  check(driver.cuMemsetD8_v2(device_pointer(dst), value, bytes), "cuMemsetD8", bytes);
  check(driver.cuCtxSynchronize(), "cuCtxSynchronize after cuMemsetD8", bytes);
}

void* Gpu::create_stream() {
  void* stream = nullptr;
  check(driver.cuStreamCreate(&stream, kStreamNonBlocking), "cuStreamCreate");
  return stream;
}

void Gpu::destroy_stream(void* stream) noexcept {
  if (stream != nullptr) driver.cuStreamDestroy_v2(stream);
}

void Gpu::copy_async(void* dst, const void* src, std::size_t bytes, void* stream) {
  check(driver.cuMemcpyAsync(device_pointer(dst), device_pointer(src), bytes, stream), "cuMemcpyAsync", bytes);
}

void Gpu::synchronize(void* stream) { check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize"); }

}  // namespace rdmx::cli::gpu
