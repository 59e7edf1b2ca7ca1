// SPDX-License-Identifier: MIT
// The GPU's reduction kernels: dst[i] = a[i] op b[i] and dst[i] /= divisor,
// one grid-stride kernel per (type, op), each element reduced by the very
// functions the CPU's scalar kernels use (coll/reduce_element.hpp), so both
// give the same bits. Built by nvcc into a fat binary that librdmx embeds
// and loads through the driver API (kernels.cpp); extern "C" names so the
// loader finds them as rdmx_reduce_<type>_<op> and rdmx_divide_<type>.
#include <cstddef>
#include <cstdint>

#include "coll/reduce_element.hpp"

namespace {

using rdmx::coll::element::Op;
namespace element = rdmx::coll::element;

template <class T, Op O>
__device__ T reduce_one(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    return element::float_op<O>(a, b);
  else
    return element::int_op<O>(a, b);
}

template <class T, Op O>
__device__ void reduce_plain(T* dst, const T* a, const T* b, std::size_t count) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride)
    dst[i] = reduce_one<T, O>(a[i], b[i]);
}

template <class Format, Op O>
__device__ void reduce_half(std::uint16_t* dst, const std::uint16_t* a, const std::uint16_t* b, std::size_t count) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride)
    dst[i] = element::half_op<O, Format>(a[i], b[i]);
}

template <class F>
__device__ void divide_plain(F* dst, std::size_t count, int divisor) {
  const F v = static_cast<F>(divisor);
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride)
    dst[i] = element::float_divide(dst[i], v);
}

template <class Format>
__device__ void divide_half(std::uint16_t* dst, std::size_t count, int divisor) {
  const float v = static_cast<float>(divisor);
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride)
    dst[i] = element::half_divide<Format>(dst[i], v);
}

}  // namespace

#define RDMX_REDUCE_KERNEL(name, T, op)                                                                              \
  extern "C" __global__ void rdmx_reduce_##name##_##op(void* dst, const void* a, const void* b, std::size_t count) { \
    reduce_plain<T, Op::op>(static_cast<T*>(dst), static_cast<const T*>(a), static_cast<const T*>(b), count);        \
  }
#define RDMX_REDUCE_HALF_KERNEL(name, Format, op)                                                                    \
  extern "C" __global__ void rdmx_reduce_##name##_##op(void* dst, const void* a, const void* b, std::size_t count) { \
    reduce_half<element::Format, Op::op>(static_cast<std::uint16_t*>(dst), static_cast<const std::uint16_t*>(a),     \
                                         static_cast<const std::uint16_t*>(b), count);                               \
  }
#define RDMX_REDUCE_OPS(macro, name, T) macro(name, T, Sum) macro(name, T, Prod) macro(name, T, Min) macro(name, T, Max)

RDMX_REDUCE_OPS(RDMX_REDUCE_KERNEL, int8, std::int8_t)
RDMX_REDUCE_OPS(RDMX_REDUCE_KERNEL, uint8, std::uint8_t)
RDMX_REDUCE_OPS(RDMX_REDUCE_KERNEL, int32, std::int32_t)
RDMX_REDUCE_OPS(RDMX_REDUCE_KERNEL, uint32, std::uint32_t)
RDMX_REDUCE_OPS(RDMX_REDUCE_KERNEL, int64, std::int64_t)
RDMX_REDUCE_OPS(RDMX_REDUCE_KERNEL, uint64, std::uint64_t)
RDMX_REDUCE_OPS(RDMX_REDUCE_KERNEL, float32, float)
RDMX_REDUCE_OPS(RDMX_REDUCE_KERNEL, float64, double)
RDMX_REDUCE_OPS(RDMX_REDUCE_HALF_KERNEL, float16, Fp16)
RDMX_REDUCE_OPS(RDMX_REDUCE_HALF_KERNEL, bfloat16, Bf16)

extern "C" __global__ void rdmx_divide_float32(void* dst, std::size_t count, int divisor) {
  divide_plain(static_cast<float*>(dst), count, divisor);
}
extern "C" __global__ void rdmx_divide_float64(void* dst, std::size_t count, int divisor) {
  divide_plain(static_cast<double*>(dst), count, divisor);
}
extern "C" __global__ void rdmx_divide_float16(void* dst, std::size_t count, int divisor) {
  divide_half<element::Fp16>(static_cast<std::uint16_t*>(dst), count, divisor);
}
extern "C" __global__ void rdmx_divide_bfloat16(void* dst, std::size_t count, int divisor) {
  divide_half<element::Bf16>(static_cast<std::uint16_t*>(dst), count, divisor);
}
