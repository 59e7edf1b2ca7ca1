// SPDX-License-Identifier: MIT
#include "reduce/reference.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace rdmx::coll::ref {

bool is_float(Kind k) { return k == Kind::F16 || k == Kind::BF16 || k == Kind::F32 || k == Kind::F64; }

// The ISAs this CPU has (reduce_function_for non-null).
std::vector<const char*> available_isas() {
  std::vector<const char*> out;
  for (const char* isa : kIsas)
    if (reduce_function_for(isa, DataType::Float32, ReduceOp::Sum) != nullptr) out.push_back(isa);
  return out;
}

// ---------------------------------------------------------------------------
// Reference decoders/encoders (independent of the code under test).

double dec16(std::uint16_t h) {  // finite or inf; not NaN
  const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
  const double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 31) return s * INFINITY;
  if (e == 0) return s * std::ldexp(m, -24);
  return s * std::ldexp(1024 + m, e - 25);
}
double decbf(std::uint16_t h) {
  const int e = (h >> 7) & 0xFF, m = h & 0x7F;
  const double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 255) return s * INFINITY;
  if (e == 0) return s * std::ldexp(m, -133);
  return s * std::ldexp(128 + m, e - 134);
}
double dec32(std::uint32_t u) {
  const int e = static_cast<int>((u >> 23) & 0xFF);
  const std::uint32_t m = u & 0x7FFFFF;
  const double s = (u >> 31) ? -1.0 : 1.0;
  if (e == 255) return s * INFINITY;
  if (e == 0) return s * std::ldexp(m, -149);
  return s * std::ldexp(static_cast<double>(0x800000 + m), e - 150);
}
bool nan16(std::uint16_t h) { return (h & 0x7FFF) > 0x7C00; }
bool nanbf(std::uint16_t h) { return (h & 0x7FFF) > 0x7F80; }
bool nan32(std::uint32_t u) { return (u & 0x7FFFFFFF) > 0x7F800000; }
bool nan64(std::uint64_t u) { return (u & 0x7FFFFFFFFFFFFFFFull) > 0x7FF0000000000000ull; }

// Rounds a finite or infinite double that is exact in fp32 (or any double)
// to a format with `mant` fraction bits, exponent bias `bias` and max biased
// exponent `emax_field` (all-ones = inf), nearest even.
std::uint32_t encode_ref(double v, int mant, int bias, int exp_bits) {
  const std::uint32_t sign = std::signbit(v) ? (1u << (mant + exp_bits)) : 0u;
  const std::uint32_t inf = ((1u << exp_bits) - 1) << mant;
  v = std::fabs(v);
  if (std::isinf(v)) return sign | inf;
  if (v == 0) return sign;
  const int emin = 1 - bias;  // exponent of the smallest normal
  int e;
  std::frexp(v, &e);
  e -= 1;          // v in [2^e, 2^(e+1))
  if (e < emin) {  // denormal range: units of 2^(emin - mant)
    const double q = std::nearbyint(std::ldexp(v, mant - emin));
    return sign | static_cast<std::uint32_t>(q);  // q == 2^mant is the smallest normal's encoding
  }
  double q = std::nearbyint(std::ldexp(v, mant - e));  // in [2^mant, 2^(mant+1)]
  if (q == std::ldexp(1.0, mant + 1)) {
    q /= 2;
    ++e;
  }
  if (e + bias >= (1 << exp_bits) - 1) return sign | inf;
  return sign | (static_cast<std::uint32_t>(e + bias) << mant) | (static_cast<std::uint32_t>(q) - (1u << mant));
}
std::uint16_t enc16(double v) { return static_cast<std::uint16_t>(encode_ref(v, 10, 15, 5)); }
std::uint16_t encbf(double v) { return static_cast<std::uint16_t>(encode_ref(v, 7, 127, 8)); }

std::uint32_t ref_half_to_float_bits(std::uint16_t h) {
  if (nan16(h)) return (static_cast<std::uint32_t>(h & 0x8000) << 16) | 0x7FC00000u | ((h & 0x3FFu) << 13);
  return std::bit_cast<std::uint32_t>(static_cast<float>(dec16(h)));
}
std::uint16_t ref_float_to_half(std::uint32_t u) {
  if (nan32(u)) return static_cast<std::uint16_t>(((u >> 16) & 0x8000) | 0x7E00 | ((u >> 13) & 0x3FF));
  return enc16(dec32(u));
}
std::uint16_t ref_float_to_bf16(std::uint32_t u) {
  if (nan32(u)) return static_cast<std::uint16_t>((u >> 16) | 0x40);
  return encbf(dec32(u));
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) std::uint32_t f16c_half_to_float_bits(std::uint16_t h) {
  return std::bit_cast<std::uint32_t>(_mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h))));
}
__attribute__((target("f16c"))) std::uint16_t f16c_float_to_half(float f) {
  return static_cast<std::uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT), 0));
}
bool has_f16c() { return __builtin_cpu_supports("f16c"); }
#else
bool has_f16c() { return false; }
std::uint32_t f16c_half_to_float_bits(std::uint16_t) { return 0; }
std::uint16_t f16c_float_to_half(float) { return 0; }
#endif

// ---------------------------------------------------------------------------
// Reference reduction, one element, on raw bits.

std::uint64_t mask_of(std::size_t size) { return size == 8 ? ~0ull : (1ull << (8 * size)) - 1; }
std::int64_t sext(std::uint64_t x, std::size_t size) {
  const int shift = 64 - static_cast<int>(8 * size);
  return static_cast<std::int64_t>(x << shift) >> shift;
}

// Min/max on decoded values: canonical NaN, -0 < +0; returns a's or b's bits.
template <class Bits>
Bits ref_minmax(bool is_min, Bits a, Bits b, double da, double db, bool na, bool nb, Bits canonical, Bits sign_bit) {
  if (na || nb) return canonical;
  if (da < db) return is_min ? a : b;
  if (db < da) return is_min ? b : a;
  if (da == 0) {  // both zeros
    const bool neg = is_min ? ((a | b) & sign_bit) != 0 : ((a & b) & sign_bit) != 0;
    return neg ? sign_bit : 0;
  }
  return a;
}

std::uint64_t ref_element(const TypeInfo& t, ReduceOp op, std::uint64_t a, std::uint64_t b) {
  if (op == ReduceOp::Avg) op = ReduceOp::Sum;
  const std::uint64_t mask = mask_of(t.size);
  const bool arith = op == ReduceOp::Sum || op == ReduceOp::Prod;
  switch (t.kind) {
    case Kind::SInt:
    case Kind::UInt: {
      if (op == ReduceOp::Sum) return (a + b) & mask;
      if (op == ReduceOp::Prod) return (a * b) & mask;
      bool less;  // a < b
      if (t.kind == Kind::SInt)
        less = sext(a, t.size) < sext(b, t.size);
      else
        less = a < b;
      if (op == ReduceOp::Min) return less ? a : b;
      return less ? b : a;
    }
    case Kind::F16:
    case Kind::BF16: {
      const bool f16 = t.kind == Kind::F16;
      const auto ha = static_cast<std::uint16_t>(a), hb = static_cast<std::uint16_t>(b);
      const bool na = f16 ? nan16(ha) : nanbf(ha), nb = f16 ? nan16(hb) : nanbf(hb);
      const std::uint16_t quiet = f16 ? 0x0200 : 0x0040;
      const double da = na ? 0 : (f16 ? dec16(ha) : decbf(ha)), db = nb ? 0 : (f16 ? dec16(hb) : decbf(hb));
      if (!arith)
        return ref_minmax<std::uint16_t>(op == ReduceOp::Min, ha, hb, da, db, na, nb, f16 ? 0x7E00 : 0x7FC0, 0x8000);
      if (na) return ha | quiet;
      if (nb) return hb | quiet;
      // The op in fp32 (via double: exact or innocuous double rounding), then rounded once.
      const float r = static_cast<float>(op == ReduceOp::Sum ? da + db : da * db);
      if (std::isnan(r)) return f16 ? 0xFE00 : 0xFFC0;  // x86 default NaN, narrowed
      return f16 ? enc16(r) : encbf(r);
    }
    case Kind::F32: {
      const auto ua = static_cast<std::uint32_t>(a), ub = static_cast<std::uint32_t>(b);
      const bool na = nan32(ua), nb = nan32(ub);
      const double da = na ? 0 : dec32(ua), db = nb ? 0 : dec32(ub);
      if (!arith)
        return ref_minmax<std::uint32_t>(op == ReduceOp::Min, ua, ub, da, db, na, nb, 0x7FC00000u, 0x80000000u);
      if (na) return ua | 0x00400000u;
      if (nb) return ub | 0x00400000u;
      const float r = static_cast<float>(op == ReduceOp::Sum ? da + db : da * db);
      if (std::isnan(r)) return 0xFFC00000u;
      return std::bit_cast<std::uint32_t>(r);
    }
    case Kind::F64: {
      const bool na = nan64(a), nb = nan64(b);
      const double da = std::bit_cast<double>(a), db = std::bit_cast<double>(b);
      if (!arith)
        return ref_minmax<std::uint64_t>(op == ReduceOp::Min, a, b, na ? 0 : da, nb ? 0 : db, na, nb,
                                         0x7FF8000000000000ull, 0x8000000000000000ull);
      if (na) return a | 0x0008000000000000ull;
      if (nb) return b | 0x0008000000000000ull;
      const double r = op == ReduceOp::Sum ? da + db : da * db;
      if (std::isnan(r)) return 0xFFF8000000000000ull;
      return std::bit_cast<std::uint64_t>(r);
    }
  }
  return 0;
}

// ---------------------------------------------------------------------------
// Buffers of raw elements.

std::uint64_t get(const std::uint8_t* p, std::size_t i, std::size_t size) {
  std::uint64_t v = 0;
  std::memcpy(&v, p + i * size, size);
  return v;
}
void put(std::uint8_t* p, std::size_t i, std::size_t size, std::uint64_t v) { std::memcpy(p + i * size, &v, size); }

std::string hex(std::uint64_t v, std::size_t size) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%0*llx", static_cast<int>(2 * size), static_cast<unsigned long long>(v));
  return buf;
}

std::vector<std::uint64_t> specials(Kind k) {
  switch (k) {
    case Kind::SInt:
    case Kind::UInt:
      return {0,
              1,
              2,
              0x7F,
              0x80,
              0xFF,
              0x7FFFFFFF,
              0x80000000,
              0xFFFFFFFF,
              0x7FFFFFFFFFFFFFFFull,
              0x8000000000000000ull,
              ~0ull,
              0x100000001ull,
              3,
              0xFE};
    case Kind::F16:
      return {0x0000, 0x8000, 0x3C00, 0xBC00, 0x0001, 0x8001, 0x03FF, 0x0400, 0x8400,
              0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7C01, 0x7D23, 0xFC05,
              0x7FFF, 0x3C01, 0x4000, 0x3800, 0x1400, 0x0200, 0x7800, 0x5BFF, 0x0002};
    case Kind::BF16:
      return {0x0000, 0x8000, 0x3F80, 0xBF80, 0x0001, 0x8001, 0x007F, 0x0080, 0x8080, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80,
              0x7FC0, 0xFFC0, 0x7F81, 0x7FA3, 0xFF81, 0x7FFF, 0x3F81, 0x4000, 0x3F00, 0x0040, 0x7F00, 0x0002, 0x5F80};
    case Kind::F32:
      return {0x00000000, 0x80000000, 0x3F800000, 0xBF800000, 0x00000001, 0x80000001, 0x007FFFFF, 0x00800000,
              0x80800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001,
              0x7FA12345, 0xFF800123, 0x7FC12345, 0xFFFFFFFF, 0x3F800001, 0x40000000, 0x3F000000, 0x477FE000,
              0x477FF000, 0x33000000, 0x33000001, 0x1F800000, 0x5F800000};
    case Kind::F64:
      return {0x0000000000000000ull, 0x8000000000000000ull, 0x3FF0000000000000ull, 0xBFF0000000000000ull,
              0x0000000000000001ull, 0x8000000000000001ull, 0x000FFFFFFFFFFFFFull, 0x0010000000000000ull,
              0x7FEFFFFFFFFFFFFFull, 0xFFEFFFFFFFFFFFFFull, 0x7FF0000000000000ull, 0xFFF0000000000000ull,
              0x7FF8000000000000ull, 0xFFF8000000000000ull, 0x7FF0000000000001ull, 0x7FF4000000012345ull,
              0xFFF0000000000123ull, 0x7FF8000000012345ull, 0x3FF0000000000001ull, 0x4000000000000000ull,
              0x1FF0000000000000ull, 0x5FF0000000000000ull};
  }
  return {};
}

// Random element bits for a type: a mix of uniform bits, moderate values (so
// sums and products mostly stay finite, with many rounding ties) and specials.
struct Gen {
  std::mt19937_64 rng{12345};
  std::uint64_t bits(const TypeInfo& t) { return rng() & mask_of(t.size); }
  std::uint64_t moderate(const TypeInfo& t) {
    const std::uint64_t sign = rng() & 1;
    const int de = static_cast<int>(rng() % 21) - 10;
    switch (t.kind) {
      case Kind::F16: return (sign << 15) | (static_cast<std::uint64_t>(15 + de) << 10) | (rng() & 0x3FF);
      case Kind::BF16: return (sign << 15) | (static_cast<std::uint64_t>(127 + de) << 7) | (rng() & 0x7F);
      case Kind::F32: return (sign << 31) | (static_cast<std::uint64_t>(127 + de) << 23) | (rng() & 0x7FFFFF);
      case Kind::F64:
        return (sign << 63) | (static_cast<std::uint64_t>(1023 + de) << 52) | (rng() & 0xFFFFFFFFFFFFFull);
      default: return (rng() % 7) - 3;  // small integers (masked by the caller)
    }
  }
  std::uint64_t any(const TypeInfo& t, const std::vector<std::uint64_t>& sp) {
    const unsigned c = rng() % 10;
    std::uint64_t v;
    if (c < 3)
      v = bits(t);
    else if (c < 8)
      v = moderate(t);
    else
      v = sp[rng() % sp.size()];
    return v & mask_of(t.size);
  }
  // b correlated with a sometimes: equal, negated, a few ulps away.
  std::uint64_t partner(const TypeInfo& t, std::uint64_t a, const std::vector<std::uint64_t>& sp) {
    const unsigned c = rng() % 10;
    const std::uint64_t sign = 1ull << (8 * t.size - 1);
    if (c == 0) return a;
    if (c == 1) return (a ^ sign) & mask_of(t.size);
    if (c == 2) return (a + (rng() % 5) - 2) & mask_of(t.size);
    return any(t, sp);
  }
};

Data random_data(const TypeInfo& t, std::size_t n, std::uint64_t seed) {
  Gen g;
  g.rng.seed(seed);
  const auto sp = specials(t.kind);
  Data d;
  d.n = n;
  d.a.resize(n * t.size);
  d.b.resize(n * t.size);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t x = g.any(t, sp);
    put(d.a.data(), i, t.size, x);
    put(d.b.data(), i, t.size, g.partner(t, x, sp));
  }
  return d;
}

// Partners for the exhaustive sweep of the 16-bit float types: zeros, one,
// the smallest denormal, the largest finite, infinities, a NaN of each kind
// and an ordinary value.
std::vector<std::uint64_t> sweep_partners(Kind k) {
  if (k == Kind::F16) return {0x0000, 0x8000, 0x3C00, 0x0001, 0x7BFF, 0xFC00, 0x7C00, 0x7D23, 0xFE01, 0x4D55};
  return {0x0000, 0x8000, 0x3F80, 0x0001, 0x7F7F, 0xFF80, 0x7F80, 0x7FA3, 0xFFC1, 0x4255};
}

Data from_pairs(const TypeInfo& t, const std::vector<std::uint64_t>& xs, const std::vector<std::uint64_t>& ys) {
  Data d;
  d.n = xs.size();
  d.a.resize(d.n * t.size);
  d.b.resize(d.n * t.size);
  for (std::size_t i = 0; i < d.n; ++i) {
    put(d.a.data(), i, t.size, xs[i] & mask_of(t.size));
    put(d.b.data(), i, t.size, ys[i] & mask_of(t.size));
  }
  return d;
}

// Every pair of the type's special values; with `sweep`, for the 16-bit float
// types also every bit pattern against each sweep partner, both ways round.
Data special_pairs(const TypeInfo& t, bool sweep) {
  const auto sp = specials(t.kind);
  std::vector<std::uint64_t> xs, ys;
  for (auto x : sp)
    for (auto y : sp) {
      xs.push_back(x);
      ys.push_back(y);
    }
  if (sweep && (t.kind == Kind::F16 || t.kind == Kind::BF16)) {
    for (std::uint64_t h = 0; h < 65536; ++h)
      for (auto y : sweep_partners(t.kind)) {
        xs.push_back(h);
        ys.push_back(y);
        xs.push_back(y);
        ys.push_back(h);
      }
  }
  return from_pairs(t, xs, ys);
}

std::vector<std::uint8_t> reference(const TypeInfo& t, ReduceOp op, const Data& d) {
  std::vector<std::uint8_t> out(d.n * t.size);
  for (std::size_t i = 0; i < d.n; ++i)
    put(out.data(), i, t.size, ref_element(t, op, get(d.a.data(), i, t.size), get(d.b.data(), i, t.size)));
  return out;
}

// got[0..n) == want[0..n) bitwise; the first mismatch is described.
::testing::AssertionResult same_bits(const TypeInfo& t, const std::uint8_t* got, const std::uint8_t* want,
                                     const std::uint8_t* a, const std::uint8_t* b, std::size_t n) {
  if (n == 0 || std::memcmp(got, want, n * t.size) == 0) return ::testing::AssertionSuccess();
  std::size_t i = 0;
  while (get(got, i, t.size) == get(want, i, t.size)) ++i;
  return ::testing::AssertionFailure() << "element " << i << " of " << n << ": a=" << hex(get(a, i, t.size), t.size)
                                       << " b=" << hex(get(b, i, t.size), t.size)
                                       << " got=" << hex(get(got, i, t.size), t.size)
                                       << " want=" << hex(get(want, i, t.size), t.size);
}

std::string label(const TypeInfo& t, ReduceOp op, const char* isa) {
  return std::string(to_string(t.type)) + " " + to_string(op) + " " + isa;
}

// Runs fn on [offset, offset+n) of d into a destination at dst_offset, with
// canaries around it, and compares with want; also dst == a and dst == b.
::testing::AssertionResult check_run(const TypeInfo& t, ReduceFn fn, const Data& d,
                                     const std::vector<std::uint8_t>& want, std::size_t offset, std::size_t n,
                                     std::size_t dst_offset) {
  const std::size_t guard = 16;
  const std::size_t es = t.size;
  std::vector<std::uint8_t> dst((n + dst_offset + 2 * guard) * es, 0xA5);
  std::uint8_t* out = dst.data() + (guard + dst_offset) * es;
  const std::uint8_t* a = d.a.data() + offset * es;
  const std::uint8_t* b = d.b.data() + offset * es;
  const std::uint8_t* w = want.data() + offset * es;
  fn(out, a, b, n);
  if (auto r = same_bits(t, out, w, a, b, n); !r) return r << " (dst separate, offset " << offset << ")";
  const std::size_t begin = (guard + dst_offset) * es, end = begin + n * es;
  for (std::size_t i = 0; i < dst.size(); i = (i + 1 == begin ? end : i + 1))
    if (dst[i] != 0xA5) return ::testing::AssertionFailure() << "wrote outside dst at byte " << i;
  // dst == a
  std::memcpy(out, a, n * es);
  fn(out, out, b, n);
  if (auto r = same_bits(t, out, w, a, b, n); !r) return r << " (dst == a, offset " << offset << ")";
  // dst == b
  std::memcpy(out, b, n * es);
  fn(out, a, out, n);
  if (auto r = same_bits(t, out, w, a, b, n); !r) return r << " (dst == b, offset " << offset << ")";
  return ::testing::AssertionSuccess();
}

}  // namespace rdmx::coll::ref
