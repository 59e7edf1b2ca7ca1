// SPDX-License-Identifier: MIT
// The element-wise reduction of one pair of values, for every type and op,
// as coll/reduce.hpp defines it bit for bit. One definition for the CPU's
// scalar kernels (reduce.cpp) and the GPU's (cuda/reduce_kernels.cu), so the
// two cannot drift apart: nvcc compiles the same functions for the device.
#pragma once

#include <cstdint>
#include <type_traits>

#include "services/half_bits.hpp"

namespace rdmx::coll::element {

using core::bf16_to_float;
using core::bits_as;
using core::float_to_bf16;
using core::float_to_half;
using core::half_to_float;

enum class Op : std::uint8_t { Sum, Prod, Min, Max };

template <class F>
struct FloatBits;
template <>
struct FloatBits<float> {
  using U = std::uint32_t;
  static constexpr U kQuiet = 0x00400000u;
  static constexpr U kDefaultNaN = 0xFFC00000u;    // x86 "real indefinite"
  static constexpr U kCanonicalNaN = 0x7FC00000u;  // min/max
};
template <>
struct FloatBits<double> {
  using U = std::uint64_t;
  static constexpr U kQuiet = 0x0008000000000000ull;
  static constexpr U kDefaultNaN = 0xFFF8000000000000ull;
  static constexpr U kCanonicalNaN = 0x7FF8000000000000ull;
};

template <class F>
RDMX_HOST_DEVICE inline F from_bits(typename FloatBits<F>::U u) {
  return bits_as<F>(u);
}
template <class F>
RDMX_HOST_DEVICE inline typename FloatBits<F>::U to_bits(F f) {
  return bits_as<typename FloatBits<F>::U>(f);
}

// The NaN a + b or a * b gives when it is NaN (as x86 with `a` first).
template <class F>
RDMX_HOST_DEVICE inline F arith_nan(F a, F b) {
  using B = FloatBits<F>;
  if (a != a) return from_bits<F>(to_bits(a) | B::kQuiet);
  if (b != b) return from_bits<F>(to_bits(b) | B::kQuiet);
  return from_bits<F>(B::kDefaultNaN);
}

template <Op O, class F>
RDMX_HOST_DEVICE inline F float_op(F a, F b) {
  if constexpr (O == Op::Sum || O == Op::Prod) {
    const F r = O == Op::Sum ? a + b : a * b;
    return r == r ? r : arith_nan(a, b);
  } else {
    if (a != a || b != b) return from_bits<F>(FloatBits<F>::kCanonicalNaN);
    // Equal values differ only in the sign of zero: min takes -0, max +0.
    if (a == b) return from_bits<F>(O == Op::Min ? to_bits(a) | to_bits(b) : to_bits(a) & to_bits(b));
    if constexpr (O == Op::Min)
      return a < b ? a : b;
    else
      return a > b ? a : b;
  }
}

template <Op O, class T>
RDMX_HOST_DEVICE inline T int_op(T a, T b) {
  using U = std::make_unsigned_t<T>;
  if constexpr (O == Op::Sum) {
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else if constexpr (O == Op::Prod) {
    // Promote narrow types to unsigned int so the product cannot overflow a signed int.
    using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
    return static_cast<T>(static_cast<U>(static_cast<W>(static_cast<U>(a)) * static_cast<W>(static_cast<U>(b))));
  } else if constexpr (O == Op::Min) {
    return b < a ? b : a;
  } else {
    return a < b ? b : a;
  }
}

// fp16/bf16 pairs: widened exactly, reduced in fp32, rounded once.
struct Fp16 {
  RDMX_HOST_DEVICE static float widen(std::uint16_t h) { return half_to_float(h); }
  RDMX_HOST_DEVICE static std::uint16_t narrow(float f) { return float_to_half(f); }
};
struct Bf16 {
  RDMX_HOST_DEVICE static float widen(std::uint16_t h) { return bf16_to_float(h); }
  RDMX_HOST_DEVICE static std::uint16_t narrow(float f) { return float_to_bf16(f); }
};
template <Op O, class Format>
RDMX_HOST_DEVICE inline std::uint16_t half_op(std::uint16_t a, std::uint16_t b) {
  return Format::narrow(float_op<O>(Format::widen(a), Format::widen(b)));
}

// x / divisor for ReduceOp::Avg; a NaN stays NaN, quieted.
template <class F>
RDMX_HOST_DEVICE inline F float_divide(F x, F divisor) {
  return x != x ? from_bits<F>(to_bits(x) | FloatBits<F>::kQuiet) : x / divisor;
}
template <class Format>
RDMX_HOST_DEVICE inline std::uint16_t half_divide(std::uint16_t h, float divisor) {
  // Widening quiets an fp16 NaN; narrowing quiets a bf16 NaN.
  const float x = Format::widen(h);
  return Format::narrow(x != x ? x : x / divisor);
}

}  // namespace rdmx::coll::element
