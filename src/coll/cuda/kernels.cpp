// SPDX-License-Identifier: MIT
#include "coll/cuda/kernels.hpp"

#include <algorithm>
#include <array>
#include <memory>
#include <string>

#include "rdmx/error.hpp"
#include "services/cuda/context.hpp"
#include "services/cuda/driver.hpp"
#include "services/cuda/per_gpu.hpp"
#include "services/cuda/pointer.hpp"

#if defined(RDMX_CUDA_FATBIN)
// The fat binary nvcc built (cmake/cuda_kernels.cmake), placed in the
// library's read-only data; the trailing zero lets the driver read it as
// one image.
asm(".section .rodata\n"
    ".balign 16\n"
    ".hidden rdmx_reduce_fatbin\n"
    ".globl rdmx_reduce_fatbin\n"
    "rdmx_reduce_fatbin:\n"
    ".incbin \"" RDMX_CUDA_FATBIN
    "\"\n"
    ".byte 0\n"
    ".previous\n");
extern "C" const unsigned char rdmx_reduce_fatbin[];
#endif

namespace rdmx::coll {
namespace {

namespace cu = core::cuda;

constexpr unsigned kThreads = 256;
// Enough blocks to fill a large GPU several times over; the kernels stride.
constexpr std::size_t kMaxBlocks = 8192;

// One GPU's loaded module and its kernels.
struct GpuKernels {
  cu::CUcontext context = nullptr;
  std::array<std::array<cu::CUfunction, 4>, kDataTypeCount> reduce{};
  std::array<cu::CUfunction, kDataTypeCount> divide{};
};

using cu::ContextScope;

#if defined(RDMX_CUDA_FATBIN)
constexpr const char* kTypeNames[kDataTypeCount] = {"int8",   "uint8",   "int32",    "uint32",  "int64",
                                                    "uint64", "float16", "bfloat16", "float32", "float64"};
constexpr const char* kOpNames[4] = {"Sum", "Prod", "Min", "Max"};

GpuKernels load_kernels(const cu::DriverApi& api, int device) {
  const ErrorContext where{.op = "cuda kernels", .sizes = "gpu=" + std::to_string(device)};
  GpuKernels kernels;
  kernels.context = cu::primary_context(api, device);
  ContextScope scope(api, kernels.context);
  cu::CUmodule module = nullptr;
  cu::check(api, api.cuModuleLoadData(&module, rdmx_reduce_fatbin), "cuModuleLoadData (the reduction kernels)",
            {.op = where.op,
             .sizes = where.sizes,
             .hint = "the kernels were built for " RDMX_CUDA_ARCHS "; a GPU or driver too old for them?"});
  for (int t = 0; t < kDataTypeCount; ++t) {
    for (int o = 0; o < 4; ++o) {
      const std::string name = std::string("rdmx_reduce_") + kTypeNames[t] + "_" + kOpNames[o];
      cu::check(api, api.cuModuleGetFunction(&kernels.reduce[t][o], module, name.c_str()), "cuModuleGetFunction",
                {.op = where.op, .sizes = name});
    }
    if (is_floating(static_cast<DataType>(t))) {
      const std::string name = std::string("rdmx_divide_") + kTypeNames[t];
      cu::check(api, api.cuModuleGetFunction(&kernels.divide[t], module, name.c_str()), "cuModuleGetFunction",
                {.op = where.op, .sizes = name});
    }
  }
  return kernels;
}
#endif

// The kernels of the GPU holding `pointer`, loaded on first use.
const GpuKernels& kernels_for(const void* pointer, std::size_t bytes, const char* op, int* device_out) {
#if defined(RDMX_CUDA_FATBIN)
  const cu::DriverApi& api = cu::require_driver(op);
  const cu::PointerInfo info = cu::classify(pointer, bytes, op);
  if (info.type != MemoryType::Cuda) {
    throw Error(ErrorCode::InvalidArgument, "the destination is not CUDA device memory",
                {.op = op, .hint = "GPU reductions take device pointers; host buffers reduce on the CPU"});
  }
  static cu::PerGpu<GpuKernels> loaded;
  *device_out = info.device;
  return loaded.get(info.device, op, [&] { return load_kernels(api, info.device); });
#else
  (void)pointer;
  (void)bytes;
  (void)device_out;
  throw Error(ErrorCode::NotSupported, "this librdmx has no GPU reduction kernels: " + cuda_kernels_note(),
              {.op = op, .hint = "rebuild rdmx where nvcc is installed (/usr/local/cuda/bin or PATH)"});
#endif
}

unsigned blocks_for(std::size_t count) {
  return static_cast<unsigned>(std::clamp<std::size_t>((count + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

void launch(const cu::DriverApi& api, const GpuKernels& kernels, cu::CUfunction function, std::size_t count,
            void** args, cu::CUstream stream, const char* op) {
  ContextScope scope(api, kernels.context);
  cu::check(api, api.cuLaunchKernel(function, blocks_for(count), 1, 1, kThreads, 1, 1, 0, stream, args, nullptr),
            "cuLaunchKernel", {.op = op, .sizes = "count=" + std::to_string(count)});
}

}  // namespace

bool cuda_kernels_built() noexcept {
#if defined(RDMX_CUDA_FATBIN)
  return true;
#else
  return false;
#endif
}

std::string cuda_kernels_note() {
#if defined(RDMX_CUDA_FATBIN)
  return "built for " RDMX_CUDA_ARCHS;
#else
  return "not built: nvcc was not found when rdmx was configured";
#endif
}

void cuda_reduce(void* dst, const void* a, const void* b, std::size_t count, DataType type, ReduceOp op,
                 cu::CUstream stream) {
  const char* name = "cuda reduce";
  if (static_cast<unsigned>(type) >= kDataTypeCount || static_cast<unsigned>(op) >= kReduceOpCount) {
    throw Error(
        ErrorCode::InvalidArgument, "invalid data type or reduction op",
        {.op = name,
         .sizes = "type=" + std::to_string(static_cast<int>(type)) + " op=" + std::to_string(static_cast<int>(op))});
  }
  if (count == 0) return;
  int device = -1;
  const GpuKernels& kernels = kernels_for(dst, count * size_of(type), name, &device);
  // Avg reduces as Sum; cuda_divide applies the division once at the end.
  const int o = op == ReduceOp::Avg ? 0 : static_cast<int>(op);
  void* args[] = {&dst, &a, &b, &count};
  launch(cu::require_driver(name), kernels, kernels.reduce[static_cast<int>(type)][o], count, args, stream, name);
}

void cuda_divide(void* dst, std::size_t count, DataType type, int divisor, cu::CUstream stream) {
  const char* name = "cuda divide";
  if (static_cast<unsigned>(type) >= kDataTypeCount || !is_floating(type)) {
    throw Error(ErrorCode::InvalidArgument, "divide: not a floating type",
                {.op = name, .hint = "ReduceOp::Avg is defined for fp16, bf16, fp32 and fp64 only"});
  }
  if (divisor == 0) throw Error(ErrorCode::InvalidArgument, "divide: divisor is 0", {.op = name});
  if (count == 0) return;
  int device = -1;
  const GpuKernels& kernels = kernels_for(dst, count * size_of(type), name, &device);
  void* args[] = {&dst, &count, &divisor};
  launch(cu::require_driver(name), kernels, kernels.divide[static_cast<int>(type)], count, args, stream, name);
}

}  // namespace rdmx::coll
