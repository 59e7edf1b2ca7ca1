// SPDX-License-Identifier: MIT
// AVX-512 (F + BW + VL) reduction kernels: 512-bit vectors, masked tails.
// Compiled with target attributes only; reduce.cpp calls them when the CPU
// has avx512f, avx512bw, avx512vl, avx2 and f16c. AVX512DQ is not used.
// Semantics (bit-identical to the scalar kernels): see coll/reduce.hpp.
#if defined(__x86_64__)

// GCC 12.2's AVX-512 intrinsics (_mm512_undefined_epi32: `__m512i __Y = __Y;`)
// raise false -Wmaybe-uninitialized warnings once inlined (GCC bug 105593,
// fixed in 12.3). The warning is reported at the header's lines, so the
// pragma must be in effect where the header is read.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "coll/reduce.hpp"

#define RDMX_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c")))
#define RDMX_AVX512_INLINE __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c"), always_inline)) inline

namespace rdmx::coll::detail {
namespace {

// ---------------------------------------------------------------------------
// Lanes: N elements of T in a register R; masked forms for the tail.

template <class M>
RDMX_AVX512_INLINE M low_mask(std::size_t n) {  // the n < bits(M) lowest bits
  return static_cast<M>((std::uint64_t{1} << n) - 1);
}

struct LaneF32 {
  using T = float;
  using R = __m512;
  using M = __mmask16;
  static constexpr std::size_t N = 16;
  static RDMX_AVX512_INLINE R load(const T* p) { return _mm512_loadu_ps(p); }
  static RDMX_AVX512_INLINE R load(const T* p, M m) { return _mm512_maskz_loadu_ps(m, p); }
  static RDMX_AVX512_INLINE void store(T* p, R r) { _mm512_storeu_ps(p, r); }
  static RDMX_AVX512_INLINE void store(T* p, R r, M m) { _mm512_mask_storeu_ps(p, m, r); }
};

struct LaneF64 {
  using T = double;
  using R = __m512d;
  using M = __mmask8;
  static constexpr std::size_t N = 8;
  static RDMX_AVX512_INLINE R load(const T* p) { return _mm512_loadu_pd(p); }
  static RDMX_AVX512_INLINE R load(const T* p, M m) { return _mm512_maskz_loadu_pd(m, p); }
  static RDMX_AVX512_INLINE void store(T* p, R r) { _mm512_storeu_pd(p, r); }
  static RDMX_AVX512_INLINE void store(T* p, R r, M m) { _mm512_mask_storeu_pd(p, m, r); }
};

template <class Int>
struct LaneInt {
  using T = Int;
  using R = __m512i;
  using M = std::conditional_t<sizeof(Int) == 1, __mmask64, std::conditional_t<sizeof(Int) == 4, __mmask16, __mmask8>>;
  static constexpr std::size_t N = 64 / sizeof(Int);
  static RDMX_AVX512_INLINE R load(const T* p) { return _mm512_loadu_si512(p); }
  static RDMX_AVX512_INLINE R load(const T* p, M m) {
    if constexpr (sizeof(Int) == 1)
      return _mm512_maskz_loadu_epi8(m, p);
    else if constexpr (sizeof(Int) == 4)
      return _mm512_maskz_loadu_epi32(m, p);
    else
      return _mm512_maskz_loadu_epi64(m, p);
  }
  static RDMX_AVX512_INLINE void store(T* p, R r) { _mm512_storeu_si512(p, r); }
  static RDMX_AVX512_INLINE void store(T* p, R r, M m) {
    if constexpr (sizeof(Int) == 1)
      _mm512_mask_storeu_epi8(p, m, r);
    else if constexpr (sizeof(Int) == 4)
      _mm512_mask_storeu_epi32(p, m, r);
    else
      _mm512_mask_storeu_epi64(p, m, r);
  }
};

// fp16: 16 halves <-> 16 floats (round to nearest even, as vcvtps2ph).
struct LaneF16 {
  using T = std::uint16_t;
  using R = __m512;
  using M = __mmask16;
  static constexpr std::size_t N = 16;
  static RDMX_AVX512_INLINE R load(const T* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static RDMX_AVX512_INLINE R load(const T* p, M m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
  static RDMX_AVX512_INLINE void store(T* p, R r) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT));
  }
  static RDMX_AVX512_INLINE void store(T* p, R r, M m) {
    _mm256_mask_storeu_epi16(p, m, _mm512_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT));
  }
};

// bf16: 32 values per step, no shuffles: the even elements (low halves of
// each 32-bit lane) shifted up and the odd ones masked are two fp32
// registers; narrowing rounds to nearest even in the upper halves, NaN quieted.
struct LaneBF16 {
  using T = std::uint16_t;
  struct R {
    __m512 even, odd;
  };
  using M = __mmask32;
  static constexpr std::size_t N = 32;
  static RDMX_AVX512_INLINE R widen(__m512i v) {
    return {_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)),
            _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))))};
  }
  static RDMX_AVX512_INLINE __m512i round_high(__m512 r) {
    const __m512i x = _mm512_castps_si512(r);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    const __m512i y = _mm512_add_epi32(x, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF)));
    return _mm512_mask_or_epi32(y, _mm512_cmp_ps_mask(r, r, _CMP_UNORD_Q), x, _mm512_set1_epi32(0x00400000));
  }
  static RDMX_AVX512_INLINE __m512i narrow(R r) {
    return _mm512_mask_blend_epi16(0xAAAAAAAAu, _mm512_srli_epi32(round_high(r.even), 16), round_high(r.odd));
  }
  static RDMX_AVX512_INLINE R load(const T* p) { return widen(_mm512_loadu_si512(p)); }
  static RDMX_AVX512_INLINE R load(const T* p, M m) { return widen(_mm512_maskz_loadu_epi16(m, p)); }
  static RDMX_AVX512_INLINE void store(T* p, R r) { _mm512_storeu_si512(p, narrow(r)); }
  static RDMX_AVX512_INLINE void store(T* p, R r, M m) { _mm512_mask_storeu_epi16(p, m, narrow(r)); }
};

// ---------------------------------------------------------------------------
// Floating ops (overloads for fp32 and fp64 registers).

RDMX_AVX512_INLINE __mmask16 unord(__m512 a, __m512 b) { return _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q); }
RDMX_AVX512_INLINE __mmask8 unord(__m512d a, __m512d b) { return _mm512_cmp_pd_mask(a, b, _CMP_UNORD_Q); }
RDMX_AVX512_INLINE __mmask16 equal(__m512 a, __m512 b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
RDMX_AVX512_INLINE __mmask8 equal(__m512d a, __m512d b) { return _mm512_cmp_pd_mask(a, b, _CMP_EQ_OQ); }
RDMX_AVX512_INLINE __m512 add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
RDMX_AVX512_INLINE __m512d add(__m512d a, __m512d b) { return _mm512_add_pd(a, b); }
RDMX_AVX512_INLINE __m512 mul(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
RDMX_AVX512_INLINE __m512d mul(__m512d a, __m512d b) { return _mm512_mul_pd(a, b); }
RDMX_AVX512_INLINE __m512 vmin(__m512 a, __m512 b) { return _mm512_min_ps(a, b); }
RDMX_AVX512_INLINE __m512d vmin(__m512d a, __m512d b) { return _mm512_min_pd(a, b); }
RDMX_AVX512_INLINE __m512 vmax(__m512 a, __m512 b) { return _mm512_max_ps(a, b); }
RDMX_AVX512_INLINE __m512d vmax(__m512d a, __m512d b) { return _mm512_max_pd(a, b); }

// Integer views for the bit fix-ups (the fp and/or forms need AVX512DQ).
RDMX_AVX512_INLINE __m512i ibits(__m512 r) { return _mm512_castps_si512(r); }
RDMX_AVX512_INLINE __m512i ibits(__m512d r) { return _mm512_castpd_si512(r); }
RDMX_AVX512_INLINE __m512 fbits(__m512i x, __m512) { return _mm512_castsi512_ps(x); }
RDMX_AVX512_INLINE __m512d fbits(__m512i x, __m512d) { return _mm512_castsi512_pd(x); }
// k ? value : src, k ? a | b : src, k ? a & b : src, per 32- or 64-bit lane.
RDMX_AVX512_INLINE __m512i put(__m512i src, __mmask16 k, __m512i v) { return _mm512_mask_mov_epi32(src, k, v); }
RDMX_AVX512_INLINE __m512i put(__m512i src, __mmask8 k, __m512i v) { return _mm512_mask_mov_epi64(src, k, v); }
RDMX_AVX512_INLINE __m512i put_or(__m512i src, __mmask16 k, __m512i a, __m512i b) {
  return _mm512_mask_or_epi32(src, k, a, b);
}
RDMX_AVX512_INLINE __m512i put_or(__m512i src, __mmask8 k, __m512i a, __m512i b) {
  return _mm512_mask_or_epi64(src, k, a, b);
}
RDMX_AVX512_INLINE __m512i put_and(__m512i src, __mmask16 k, __m512i a, __m512i b) {
  return _mm512_mask_and_epi32(src, k, a, b);
}
RDMX_AVX512_INLINE __m512i put_and(__m512i src, __mmask8 k, __m512i a, __m512i b) {
  return _mm512_mask_and_epi64(src, k, a, b);
}
RDMX_AVX512_INLINE __m512i quiet_bit(__m512) { return _mm512_set1_epi32(0x00400000); }
RDMX_AVX512_INLINE __m512i quiet_bit(__m512d) { return _mm512_set1_epi64(0x0008000000000000ll); }
RDMX_AVX512_INLINE __m512i default_nan(__m512) { return _mm512_set1_epi32(static_cast<int>(0xFFC00000u)); }
RDMX_AVX512_INLINE __m512i default_nan(__m512d) {
  return _mm512_set1_epi64(static_cast<long long>(0xFFF8000000000000ull));
}
RDMX_AVX512_INLINE __m512i canonical_nan(__m512) { return _mm512_set1_epi32(0x7FC00000); }
RDMX_AVX512_INLINE __m512i canonical_nan(__m512d) { return _mm512_set1_epi64(0x7FF8000000000000ll); }

// NaN lanes of an add/multiply, defined as x86 gives them with `a` first
// (the compiler may swap the operands of a commutative intrinsic, so the
// hardware's own choice is not relied on).
template <class R>
RDMX_AVX512_INLINE R fix_arith_nan(R a, R b, R r) {
  const auto rn = unord(r, r);
  if (rn == 0) [[likely]]
    return r;
  __m512i x = put(ibits(r), rn, default_nan(r));
  x = put_or(x, unord(b, b), ibits(b), quiet_bit(r));
  x = put_or(x, unord(a, a), ibits(a), quiet_bit(r));
  return fbits(x, r);
}

struct OpSum {
  template <class R>
  static RDMX_AVX512_INLINE R apply(R a, R b) {
    return fix_arith_nan(a, b, add(a, b));
  }
};
struct OpProd {
  template <class R>
  static RDMX_AVX512_INLINE R apply(R a, R b) {
    return fix_arith_nan(a, b, mul(a, b));
  }
};
struct OpMin {
  template <class R>
  static RDMX_AVX512_INLINE R apply(R a, R b) {
    __m512i m = put_or(ibits(vmin(a, b)), equal(a, b), ibits(a), ibits(b));  // min(-0, +0) = -0 either way
    return fbits(put(m, unord(a, b), canonical_nan(a)), a);
  }
};
struct OpMax {
  template <class R>
  static RDMX_AVX512_INLINE R apply(R a, R b) {
    __m512i m = put_and(ibits(vmax(a, b)), equal(a, b), ibits(a), ibits(b));  // max(-0, +0) = +0 either way
    return fbits(put(m, unord(a, b), canonical_nan(a)), a);
  }
};

// bf16 carries two fp32 registers.
template <class Op>
struct OnPair {
  static RDMX_AVX512_INLINE LaneBF16::R apply(LaneBF16::R a, LaneBF16::R b) {
    return {Op::apply(a.even, b.even), Op::apply(a.odd, b.odd)};
  }
};

// ---------------------------------------------------------------------------
// Integer ops.

template <std::size_t Size>
struct IntSum {
  static RDMX_AVX512_INLINE __m512i apply(__m512i a, __m512i b) {
    if constexpr (Size == 1)
      return _mm512_add_epi8(a, b);
    else if constexpr (Size == 4)
      return _mm512_add_epi32(a, b);
    else
      return _mm512_add_epi64(a, b);
  }
};

template <std::size_t Size>
struct IntProd {
  static RDMX_AVX512_INLINE __m512i apply(__m512i a, __m512i b) {
    if constexpr (Size == 1) {
      // Bytes: the low byte of a 16-bit product is the 8-bit product.
      const __m512i even = _mm512_mullo_epi16(a, b);
      const __m512i odd = _mm512_mullo_epi16(_mm512_srli_epi16(a, 8), _mm512_srli_epi16(b, 8));
      return _mm512_mask_blend_epi8(0xAAAAAAAAAAAAAAAAull, even, _mm512_slli_epi16(odd, 8));
    } else if constexpr (Size == 4) {
      return _mm512_mullo_epi32(a, b);
    } else {
      // lo*lo + ((hi*lo + lo*hi) << 32), mod 2^64 (vpmullq needs AVX512DQ).
      const __m512i lolo = _mm512_mul_epu32(a, b);
      const __m512i cross = _mm512_add_epi64(_mm512_mul_epu32(_mm512_srli_epi64(a, 32), b),
                                             _mm512_mul_epu32(a, _mm512_srli_epi64(b, 32)));
      return _mm512_add_epi64(lolo, _mm512_slli_epi64(cross, 32));
    }
  }
};

template <class T>
struct IntMin {
  static RDMX_AVX512_INLINE __m512i apply(__m512i a, __m512i b) {
    if constexpr (std::is_same_v<T, std::int8_t>)
      return _mm512_min_epi8(a, b);
    else if constexpr (std::is_same_v<T, std::uint8_t>)
      return _mm512_min_epu8(a, b);
    else if constexpr (std::is_same_v<T, std::int32_t>)
      return _mm512_min_epi32(a, b);
    else if constexpr (std::is_same_v<T, std::uint32_t>)
      return _mm512_min_epu32(a, b);
    else if constexpr (std::is_same_v<T, std::int64_t>)
      return _mm512_min_epi64(a, b);
    else
      return _mm512_min_epu64(a, b);
  }
};

template <class T>
struct IntMax {
  static RDMX_AVX512_INLINE __m512i apply(__m512i a, __m512i b) {
    if constexpr (std::is_same_v<T, std::int8_t>)
      return _mm512_max_epi8(a, b);
    else if constexpr (std::is_same_v<T, std::uint8_t>)
      return _mm512_max_epu8(a, b);
    else if constexpr (std::is_same_v<T, std::int32_t>)
      return _mm512_max_epi32(a, b);
    else if constexpr (std::is_same_v<T, std::uint32_t>)
      return _mm512_max_epu32(a, b);
    else if constexpr (std::is_same_v<T, std::int64_t>)
      return _mm512_max_epi64(a, b);
    else
      return _mm512_max_epu64(a, b);
  }
};

// ---------------------------------------------------------------------------
// The loop: 4 steps per iteration, then single steps, then one masked step.

template <class Lane, class Op>
RDMX_AVX512_INLINE void step(typename Lane::T* d, const typename Lane::T* a, const typename Lane::T* b) {
  const auto x = Lane::load(a);
  const auto y = Lane::load(b);
  Lane::store(d, Op::apply(x, y));
}

template <class Lane, class Op>
RDMX_AVX512 void kernel(void* dst, const void* a, const void* b, std::size_t count) {
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
    const auto m = low_mask<typename Lane::M>(count - i);
    const auto va = Lane::load(x + i, m);
    const auto vb = Lane::load(y + i, m);
    Lane::store(d + i, Op::apply(va, vb), m);
  }
}

// ---------------------------------------------------------------------------
// divide: dst[i] /= divisor.

RDMX_AVX512_INLINE __m512 divide_by(__m512 x, __m512 vf, __m512d) { return _mm512_div_ps(x, vf); }
RDMX_AVX512_INLINE __m512d divide_by(__m512d x, __m512, __m512d vd) { return _mm512_div_pd(x, vd); }
RDMX_AVX512_INLINE LaneBF16::R divide_by(LaneBF16::R x, __m512 vf, __m512d) {
  return {_mm512_div_ps(x.even, vf), _mm512_div_ps(x.odd, vf)};
}

template <class Lane>
RDMX_AVX512 void divide_kernel(void* dst, std::size_t count, int divisor) {
  using T = typename Lane::T;
  constexpr std::size_t N = Lane::N;
  auto* d = static_cast<T*>(dst);
  const __m512 vf = _mm512_set1_ps(static_cast<float>(divisor));
  const __m512d vd = _mm512_set1_pd(static_cast<double>(divisor));
  std::size_t i = 0;
  for (; i + N <= count; i += N) Lane::store(d + i, divide_by(Lane::load(d + i), vf, vd));
  if (i < count) {
    const auto m = low_mask<typename Lane::M>(count - i);
    Lane::store(d + i, divide_by(Lane::load(d + i, m), vf, vd), m);
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

template <ReduceOp Op, class FOp>
ReduceFn for_op(DataType type) {
  switch (type) {
    case DataType::Int8: return int_kernel<std::int8_t, Op>();
    case DataType::Uint8: return int_kernel<std::uint8_t, Op>();
    case DataType::Int32: return int_kernel<std::int32_t, Op>();
    case DataType::Uint32: return int_kernel<std::uint32_t, Op>();
    case DataType::Int64: return int_kernel<std::int64_t, Op>();
    case DataType::Uint64: return int_kernel<std::uint64_t, Op>();
    case DataType::Float16: return &kernel<LaneF16, FOp>;
    case DataType::BFloat16: return &kernel<LaneBF16, OnPair<FOp>>;
    case DataType::Float32: return &kernel<LaneF32, FOp>;
    case DataType::Float64: return &kernel<LaneF64, FOp>;
  }
  return nullptr;
}

}  // namespace

ReduceFn avx512_reduce(DataType type, ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return for_op<ReduceOp::Sum, OpSum>(type);
    case ReduceOp::Prod: return for_op<ReduceOp::Prod, OpProd>(type);
    case ReduceOp::Min: return for_op<ReduceOp::Min, OpMin>(type);
    case ReduceOp::Max: return for_op<ReduceOp::Max, OpMax>(type);
  }
  return nullptr;
}

DivideFn avx512_divide(DataType type) noexcept {
  switch (type) {
    case DataType::Float16: return &divide_kernel<LaneF16>;
    case DataType::BFloat16: return &divide_kernel<LaneBF16>;
    case DataType::Float32: return &divide_kernel<LaneF32>;
    case DataType::Float64: return &divide_kernel<LaneF64>;
    default: return nullptr;
  }
}

}  // namespace rdmx::coll::detail

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // __x86_64__
