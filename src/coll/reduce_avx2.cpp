// SPDX-License-Identifier: MIT
// AVX2 (+F16C) reduction kernels: 256-bit vectors. Compiled with target
// attributes only; reduce.cpp calls them when the CPU has avx2 and f16c.
// Semantics (bit-identical to the scalar kernels): see coll/reduce.hpp.
#if defined(__x86_64__)

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "coll/reduce.hpp"

#define RDMX_AVX2 __attribute__((target("avx2,f16c")))
#define RDMX_AVX2_INLINE __attribute__((target("avx2,f16c"), always_inline)) inline

namespace rdmx::coll::detail {
namespace {

// ---------------------------------------------------------------------------
// Lanes: how N elements of type T are loaded into a register R and stored back.

struct LaneF32 {
  using T = float;
  using R = __m256;
  static constexpr std::size_t N = 8;
  static RDMX_AVX2_INLINE R load(const T* p) { return _mm256_loadu_ps(p); }
  static RDMX_AVX2_INLINE void store(T* p, R r) { _mm256_storeu_ps(p, r); }
};

struct LaneF64 {
  using T = double;
  using R = __m256d;
  static constexpr std::size_t N = 4;
  static RDMX_AVX2_INLINE R load(const T* p) { return _mm256_loadu_pd(p); }
  static RDMX_AVX2_INLINE void store(T* p, R r) { _mm256_storeu_pd(p, r); }
};

template <class Int>
struct LaneInt {
  using T = Int;
  using R = __m256i;
  static constexpr std::size_t N = 32 / sizeof(Int);
  static RDMX_AVX2_INLINE R load(const T* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static RDMX_AVX2_INLINE void store(T* p, R r) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), r); }
};

// fp16: 8 halves <-> 8 floats (F16C, round to nearest even).
struct LaneF16 {
  using T = std::uint16_t;
  using R = __m256;
  static constexpr std::size_t N = 8;
  static RDMX_AVX2_INLINE R load(const T* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static RDMX_AVX2_INLINE void store(T* p, R r) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT));
  }
};

// fp32 -> bf16 in the upper 16 bits of each 32-bit lane: nearest even, NaN quieted.
RDMX_AVX2_INLINE __m256i round_bf16_high(__m256 r) {
  const __m256i x = _mm256_castps_si256(r);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(x, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)));
  const __m256i quiet = _mm256_or_si256(x, _mm256_set1_epi32(0x00400000));
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(r, r, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

// bf16: 16 values per step, no shuffles: the even elements (low halves of
// each 32-bit lane) shifted up and the odd ones masked are two fp32 registers.
struct LaneBF16 {
  using T = std::uint16_t;
  struct R {
    __m256 even, odd;
  };
  static constexpr std::size_t N = 16;
  static RDMX_AVX2_INLINE R load(const T* p) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return {_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)),
            _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))))};
  }
  static RDMX_AVX2_INLINE void store(T* p, R r) {
    const __m256i even = _mm256_srli_epi32(round_bf16_high(r.even), 16);
    const __m256i odd = round_bf16_high(r.odd);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_blend_epi16(even, odd, 0xAA));
  }
};

// ---------------------------------------------------------------------------
// Floating ops on fp32 / fp64 registers.

// Overloads for fp32 and fp64 registers (vector types make poor template
// arguments: GCC drops their attributes).
RDMX_AVX2_INLINE __m256 splat_bits(__m256, std::uint32_t u) {
  return _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(u)));
}
RDMX_AVX2_INLINE __m256d splat_bits(__m256d, std::uint64_t u) {
  return _mm256_castsi256_pd(_mm256_set1_epi64x(static_cast<long long>(u)));
}
RDMX_AVX2_INLINE __m256 quiet_bit(__m256 r) { return splat_bits(r, 0x00400000u); }
RDMX_AVX2_INLINE __m256d quiet_bit(__m256d r) { return splat_bits(r, 0x0008000000000000ull); }
RDMX_AVX2_INLINE __m256 default_nan(__m256 r) { return splat_bits(r, 0xFFC00000u); }
RDMX_AVX2_INLINE __m256d default_nan(__m256d r) { return splat_bits(r, 0xFFF8000000000000ull); }
RDMX_AVX2_INLINE __m256 canonical_nan(__m256 r) { return splat_bits(r, 0x7FC00000u); }
RDMX_AVX2_INLINE __m256d canonical_nan(__m256d r) { return splat_bits(r, 0x7FF8000000000000ull); }
RDMX_AVX2_INLINE __m256 unord(__m256 a, __m256 b) { return _mm256_cmp_ps(a, b, _CMP_UNORD_Q); }
RDMX_AVX2_INLINE __m256d unord(__m256d a, __m256d b) { return _mm256_cmp_pd(a, b, _CMP_UNORD_Q); }
RDMX_AVX2_INLINE __m256 equal(__m256 a, __m256 b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
RDMX_AVX2_INLINE __m256d equal(__m256d a, __m256d b) { return _mm256_cmp_pd(a, b, _CMP_EQ_OQ); }
RDMX_AVX2_INLINE bool any(__m256 mask) { return _mm256_movemask_ps(mask) != 0; }
RDMX_AVX2_INLINE bool any(__m256d mask) { return _mm256_movemask_pd(mask) != 0; }
RDMX_AVX2_INLINE __m256 blend(__m256 a, __m256 b, __m256 mask) { return _mm256_blendv_ps(a, b, mask); }
RDMX_AVX2_INLINE __m256d blend(__m256d a, __m256d b, __m256d mask) { return _mm256_blendv_pd(a, b, mask); }
RDMX_AVX2_INLINE __m256 bit_or(__m256 a, __m256 b) { return _mm256_or_ps(a, b); }
RDMX_AVX2_INLINE __m256d bit_or(__m256d a, __m256d b) { return _mm256_or_pd(a, b); }
RDMX_AVX2_INLINE __m256 bit_and(__m256 a, __m256 b) { return _mm256_and_ps(a, b); }
RDMX_AVX2_INLINE __m256d bit_and(__m256d a, __m256d b) { return _mm256_and_pd(a, b); }
RDMX_AVX2_INLINE __m256 add(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
RDMX_AVX2_INLINE __m256d add(__m256d a, __m256d b) { return _mm256_add_pd(a, b); }
RDMX_AVX2_INLINE __m256 mul(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
RDMX_AVX2_INLINE __m256d mul(__m256d a, __m256d b) { return _mm256_mul_pd(a, b); }
RDMX_AVX2_INLINE __m256 vmin(__m256 a, __m256 b) { return _mm256_min_ps(a, b); }
RDMX_AVX2_INLINE __m256d vmin(__m256d a, __m256d b) { return _mm256_min_pd(a, b); }
RDMX_AVX2_INLINE __m256 vmax(__m256 a, __m256 b) { return _mm256_max_ps(a, b); }
RDMX_AVX2_INLINE __m256d vmax(__m256d a, __m256d b) { return _mm256_max_pd(a, b); }

// NaN lanes of an add/multiply, defined as x86 gives them with `a` first
// (the compiler may swap the operands of a commutative intrinsic, so the
// hardware's own choice is not relied on).
template <class R>
RDMX_AVX2_INLINE R fix_arith_nan(R a, R b, R r) {
  const R rn = unord(r, r);
  if (!any(rn)) [[likely]]
    return r;
  r = blend(r, default_nan(r), rn);
  r = blend(r, bit_or(b, quiet_bit(r)), unord(b, b));
  return blend(r, bit_or(a, quiet_bit(r)), unord(a, a));
}

struct OpSum {
  template <class R>
  static RDMX_AVX2_INLINE R apply(R a, R b) {
    return fix_arith_nan(a, b, add(a, b));
  }
};
struct OpProd {
  template <class R>
  static RDMX_AVX2_INLINE R apply(R a, R b) {
    return fix_arith_nan(a, b, mul(a, b));
  }
};
struct OpMin {
  template <class R>
  static RDMX_AVX2_INLINE R apply(R a, R b) {
    R m = vmin(a, b);
    m = blend(m, bit_or(a, b), equal(a, b));  // min(-0, +0) = -0 either way
    return blend(m, canonical_nan(m), unord(a, b));
  }
};
struct OpMax {
  template <class R>
  static RDMX_AVX2_INLINE R apply(R a, R b) {
    R m = vmax(a, b);
    m = blend(m, bit_and(a, b), equal(a, b));  // max(-0, +0) = +0 either way
    return blend(m, canonical_nan(m), unord(a, b));
  }
};

// bf16 carries two fp32 registers.
template <class Op>
struct OnPair {
  static RDMX_AVX2_INLINE LaneBF16::R apply(LaneBF16::R a, LaneBF16::R b) {
    return {Op::apply(a.even, b.even), Op::apply(a.odd, b.odd)};
  }
};

// ---------------------------------------------------------------------------
// Integer ops.

template <std::size_t Size>
struct IntSum {
  static RDMX_AVX2_INLINE __m256i apply(__m256i a, __m256i b) {
    if constexpr (Size == 1)
      return _mm256_add_epi8(a, b);
    else if constexpr (Size == 4)
      return _mm256_add_epi32(a, b);
    else
      return _mm256_add_epi64(a, b);
  }
};

template <std::size_t Size>
struct IntProd {
  static RDMX_AVX2_INLINE __m256i apply(__m256i a, __m256i b) {
    if constexpr (Size == 1) {
      // Bytes: the low byte of a 16-bit product is the 8-bit product.
      const __m256i even = _mm256_mullo_epi16(a, b);
      const __m256i odd = _mm256_mullo_epi16(_mm256_srli_epi16(a, 8), _mm256_srli_epi16(b, 8));
      return _mm256_or_si256(_mm256_and_si256(even, _mm256_set1_epi16(0x00FF)), _mm256_slli_epi16(odd, 8));
    } else if constexpr (Size == 4) {
      return _mm256_mullo_epi32(a, b);
    } else {
      // lo*lo + ((hi*lo + lo*hi) << 32), mod 2^64.
      const __m256i lolo = _mm256_mul_epu32(a, b);
      const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b),
                                             _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32)));
      return _mm256_add_epi64(lolo, _mm256_slli_epi64(cross, 32));
    }
  }
};

// a > b, per the signedness of T.
template <class T>
RDMX_AVX2_INLINE __m256i greater64(__m256i a, __m256i b) {
  if constexpr (std::is_signed_v<T>) {
    return _mm256_cmpgt_epi64(a, b);
  } else {
    const __m256i bias = _mm256_set1_epi64x(static_cast<long long>(0x8000000000000000ull));
    return _mm256_cmpgt_epi64(_mm256_xor_si256(a, bias), _mm256_xor_si256(b, bias));
  }
}

template <class T>
struct IntMin {
  static RDMX_AVX2_INLINE __m256i apply(__m256i a, __m256i b) {
    if constexpr (std::is_same_v<T, std::int8_t>)
      return _mm256_min_epi8(a, b);
    else if constexpr (std::is_same_v<T, std::uint8_t>)
      return _mm256_min_epu8(a, b);
    else if constexpr (std::is_same_v<T, std::int32_t>)
      return _mm256_min_epi32(a, b);
    else if constexpr (std::is_same_v<T, std::uint32_t>)
      return _mm256_min_epu32(a, b);
    else
      return _mm256_blendv_epi8(a, b, greater64<T>(a, b));
  }
};

template <class T>
struct IntMax {
  static RDMX_AVX2_INLINE __m256i apply(__m256i a, __m256i b) {
    if constexpr (std::is_same_v<T, std::int8_t>)
      return _mm256_max_epi8(a, b);
    else if constexpr (std::is_same_v<T, std::uint8_t>)
      return _mm256_max_epu8(a, b);
    else if constexpr (std::is_same_v<T, std::int32_t>)
      return _mm256_max_epi32(a, b);
    else if constexpr (std::is_same_v<T, std::uint32_t>)
      return _mm256_max_epu32(a, b);
    else
      return _mm256_blendv_epi8(b, a, greater64<T>(a, b));
  }
};

// ---------------------------------------------------------------------------
// The loop: 4 steps per iteration, then single steps, then the tail through a
// stack buffer (so the tail gets the same vector op).

template <class Lane, class Op>
RDMX_AVX2_INLINE void step(typename Lane::T* d, const typename Lane::T* a, const typename Lane::T* b) {
  const auto x = Lane::load(a);
  const auto y = Lane::load(b);
  Lane::store(d, Op::apply(x, y));
}

template <class Lane, class Op>
RDMX_AVX2 void kernel(void* dst, const void* a, const void* b, std::size_t count) {
  using T = typename Lane::T;
  constexpr std::size_t N = Lane::N;
  auto* d = static_cast<T*>(dst);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  std::size_t i = 0;
  for (; i + 4 * N <= count; i += 4 * N) {
    step<Lane, Op>(d + i, x + i, y + i);
    step<Lane, Op>(d + i + N, x + i + N, y + i + N);
    step<Lane, Op>(d + i + 2 * N, x + i + 2 * N, y + i + 2 * N);
    step<Lane, Op>(d + i + 3 * N, x + i + 3 * N, y + i + 3 * N);
  }
  for (; i + N <= count; i += N) step<Lane, Op>(d + i, x + i, y + i);
  if (i < count) {
    const std::size_t bytes = (count - i) * sizeof(T);
    alignas(32) T tx[N] = {}, ty[N] = {}, td[N];
    std::memcpy(tx, x + i, bytes);
    std::memcpy(ty, y + i, bytes);
    step<Lane, Op>(td, tx, ty);
    std::memcpy(d + i, td, bytes);
  }
}

// ---------------------------------------------------------------------------
// divide: dst[i] /= divisor.

RDMX_AVX2_INLINE __m256 divide_step(__m256 x, __m256 vf, __m256d) { return _mm256_div_ps(x, vf); }
RDMX_AVX2_INLINE __m256d divide_step(__m256d x, __m256, __m256d vd) { return _mm256_div_pd(x, vd); }
RDMX_AVX2_INLINE LaneBF16::R divide_step(LaneBF16::R x, __m256 vf, __m256d) {
  return {_mm256_div_ps(x.even, vf), _mm256_div_ps(x.odd, vf)};
}

template <class Lane>
RDMX_AVX2 void divide_kernel(void* dst, std::size_t count, int divisor) {
  using T = typename Lane::T;
  constexpr std::size_t N = Lane::N;
  auto* d = static_cast<T*>(dst);
  const __m256 vf = _mm256_set1_ps(static_cast<float>(divisor));
  const __m256d vd = _mm256_set1_pd(static_cast<double>(divisor));
  std::size_t i = 0;
  for (; i + N <= count; i += N) Lane::store(d + i, divide_step(Lane::load(d + i), vf, vd));
  if (i < count) {
    const std::size_t bytes = (count - i) * sizeof(T);
    alignas(32) T t[N] = {};
    std::memcpy(t, d + i, bytes);
    Lane::store(t, divide_step(Lane::load(t), vf, vd));
    std::memcpy(d + i, t, bytes);
  }
}

// ---------------------------------------------------------------------------

template <class Int, ReduceOp Op>
ReduceFn int_kernel() {
  using L = LaneInt<Int>;
  if constexpr (Op == ReduceOp::Sum)
    return &kernel<L, IntSum<sizeof(Int)>>;
  else if constexpr (Op == ReduceOp::Prod)
    return &kernel<L, IntProd<sizeof(Int)>>;
  else if constexpr (Op == ReduceOp::Min)
    return &kernel<L, IntMin<Int>>;
  else
    return &kernel<L, IntMax<Int>>;
}

template <class FOp>
ReduceFn float_kernel(DataType type) {
  switch (type) {
    case DataType::Float16: return &kernel<LaneF16, FOp>;
    case DataType::BFloat16: return &kernel<LaneBF16, OnPair<FOp>>;
    case DataType::Float32: return &kernel<LaneF32, FOp>;
    case DataType::Float64: return &kernel<LaneF64, FOp>;
    default: return nullptr;
  }
}

template <ReduceOp Op, class FOp>
ReduceFn for_op(DataType type) {
  switch (type) {
    case DataType::Int8: return int_kernel<std::int8_t, Op>();
    case DataType::Uint8: return int_kernel<std::uint8_t, Op>();
    case DataType::Int32: return int_kernel<std::int32_t, Op>();
    case DataType::Uint32: return int_kernel<std::uint32_t, Op>();
    case DataType::Int64: return int_kernel<std::int64_t, Op>();
    case DataType::Uint64: return int_kernel<std::uint64_t, Op>();
    default: return float_kernel<FOp>(type);
  }
}

}  // namespace

ReduceFn avx2_reduce(DataType type, ReduceOp op) noexcept {
  if (static_cast<unsigned>(type) >= static_cast<unsigned>(kDataTypeCount)) return nullptr;
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return for_op<ReduceOp::Sum, OpSum>(type);
    case ReduceOp::Prod: return for_op<ReduceOp::Prod, OpProd>(type);
    case ReduceOp::Min: return for_op<ReduceOp::Min, OpMin>(type);
    case ReduceOp::Max: return for_op<ReduceOp::Max, OpMax>(type);
  }
  return nullptr;
}

DivideFn avx2_divide(DataType type) noexcept {
  switch (type) {
    case DataType::Float16: return &divide_kernel<LaneF16>;
    case DataType::BFloat16: return &divide_kernel<LaneBF16>;
    case DataType::Float32: return &divide_kernel<LaneF32>;
    case DataType::Float64: return &divide_kernel<LaneF64>;
    default: return nullptr;
  }
}

}  // namespace rdmx::coll::detail

#endif  // __x86_64__
