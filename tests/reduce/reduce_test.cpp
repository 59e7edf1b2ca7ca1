// SPDX-License-Identifier: MIT
// Tests for the reduction kernels (src/coll/reduce.hpp) against an
// independent reference: plain loops over values decoded here (fp16/bf16/fp32
// by ldexp, rounding by nearbyint in double), for every type x op x ISA this
// CPU has, special values, every tail length, misaligned and aliased buffers.
#include "coll/reduce.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "rdmx/error.hpp"
#include "reduce/reference.hpp"

namespace rdmx::coll {
namespace {

using namespace ref;

// ---------------------------------------------------------------------------
// Conversions.

TEST(ReduceConvert, HalfToFloatAllPatterns) {
  const bool f16c = has_f16c();
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto x = static_cast<std::uint16_t>(h);
    const std::uint32_t got = std::bit_cast<std::uint32_t>(half_to_float(x));
    ASSERT_EQ(got, ref_half_to_float_bits(x)) << "h=" << hex(h, 2);
    if (f16c) {
      ASSERT_EQ(got, f16c_half_to_float_bits(x)) << "h=" << hex(h, 2);
    }
    // Round trip: exact for numbers, quieted for NaN.
    ASSERT_EQ(float_to_half(half_to_float(x)), nan16(x) ? (x | 0x0200) : x) << "h=" << hex(h, 2);
  }
}

TEST(ReduceConvert, Bf16ToFloatAllPatterns) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto x = static_cast<std::uint16_t>(h);
    const std::uint32_t got = std::bit_cast<std::uint32_t>(bf16_to_float(x));
    ASSERT_EQ(got, h << 16);
    if (!nanbf(x)) {
      ASSERT_EQ(static_cast<double>(bf16_to_float(x)), decbf(x)) << "h=" << hex(h, 2);
    }
    ASSERT_EQ(float_to_bf16(bf16_to_float(x)), nanbf(x) ? (x | 0x0040) : x) << "h=" << hex(h, 2);
  }
}

// The floats that matter for rounding: every tie between neighbouring
// 16-bit values, one fp32 ulp either side, boundaries, and random floats.
std::vector<std::uint32_t> rounding_floats() {
  std::vector<std::uint32_t> out;
  for (std::uint32_t h = 0; h < 0x7C00; ++h) {  // fp16 ties (up to 65504 and the 65520 tie to inf)
    const double mid = (dec16(static_cast<std::uint16_t>(h)) + dec16(static_cast<std::uint16_t>(h + 1))) / 2;
    const std::uint32_t u = std::bit_cast<std::uint32_t>(static_cast<float>(mid));
    for (std::uint32_t v : {u - 1, u, u + 1, u | 0x80000000u, (u - 1) | 0x80000000u, (u + 1) | 0x80000000u})
      out.push_back(v);
  }
  for (std::uint32_t h = 0; h < 0x7F80; ++h) {  // bf16 ties
    const std::uint32_t u = (h << 16) | 0x8000u;
    for (std::uint32_t v : {u - 1, u, u + 1, u | 0x80000000u, (u - 1) | 0x80000000u, (u + 1) | 0x80000000u})
      out.push_back(v);
  }
  for (std::uint32_t u = 0; u < 0xFFFFFFFFu - 4099; u += 4099) out.push_back(u);  // a sweep of all floats
  std::mt19937 rng(7);
  for (int i = 0; i < 300000; ++i) out.push_back(static_cast<std::uint32_t>(rng()));
  for (std::uint32_t u : {0x477FE000u, 0x477FEFFFu, 0x477FF000u, 0x477FF001u, 0x47800000u, 0x7F7FFFFFu, 0x7F7F7FFFu,
                          0x7F7F8000u, 0x7F7FFFFFu, 0x38800000u, 0x387FFFFFu, 0x387FE000u, 0x387FF000u, 0x33000000u,
                          0x33000001u, 0x32FFFFFFu, 0x33800000u, 0x33C00000u, 0x00000001u, 0x007FFFFFu, 0x7F800000u,
                          0x7F800001u, 0x7FBFFFFFu, 0x7FC00000u, 0xFFFFFFFFu, 0x7F802000u}) {
    out.push_back(u);
    out.push_back(u | 0x80000000u);
  }
  return out;
}

TEST(ReduceConvert, FloatToHalfAndBf16) {
  const bool f16c = has_f16c();
  for (std::uint32_t u : rounding_floats()) {
    const float f = std::bit_cast<float>(u);
    const std::uint16_t h = float_to_half(f);
    ASSERT_EQ(h, ref_float_to_half(u)) << "f=" << hex(u, 4);
    if (f16c) {
      ASSERT_EQ(h, f16c_float_to_half(f)) << "f=" << hex(u, 4);
    }
    ASSERT_EQ(float_to_bf16(f), ref_float_to_bf16(u)) << "f=" << hex(u, 4);
  }
  // A few by hand.
  EXPECT_EQ(float_to_half(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_half(65519.99f), 0x7BFF);
  EXPECT_EQ(float_to_half(65520.0f), 0x7C00);  // tie to even: inf
  EXPECT_EQ(float_to_half(-1e10f), 0xFC00);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: 0
  EXPECT_EQ(float_to_half(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(float_to_half(std::bit_cast<float>(0x7F800001u)), 0x7E00);  // sNaN -> qNaN
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x7F800001u)), 0x7FC0);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3F808000u)), 0x3F80);  // tie to even
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3F818000u)), 0x3F82);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x7F7FFFFFu)), 0x7F80);  // overflow to inf
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0xFFFF0001u)), 0xFFFF);  // NaN keeps sign and payload
}

// ---------------------------------------------------------------------------
// Kernels.

TEST(ReduceKernels, EveryTypeOpIsaAgainstReference) {
  const auto isas = available_isas();
  ASSERT_FALSE(isas.empty());
  for (const TypeInfo& t : kTypes) {
    const Data d = random_data(t, 70100, 1000 + static_cast<unsigned>(t.type));
    for (ReduceOp op : kOps) {
      const auto want = reference(t, op, d);
      for (const char* isa : isas) {
        const ReduceFn fn = reduce_function_for(isa, t.type, op);
        ASSERT_NE(fn, nullptr) << label(t, op, isa);
        // Every tail length, with the inputs and output misaligned (in elements) by different amounts.
        for (std::size_t n = 0; n <= 130; ++n) {
          const std::size_t offset = n % 4, dst_offset = (n / 4) % 3;
          ASSERT_TRUE(check_run(t, fn, d, want, offset, n, dst_offset)) << label(t, op, isa) << " n=" << n;
        }
        for (std::size_t n : {1001u, 4099u, 65537u, 70001u})
          for (std::size_t offset : {0u, 3u})
            ASSERT_TRUE(check_run(t, fn, d, want, offset, n, offset == 0 ? 1 : 0)) << label(t, op, isa) << " n=" << n;
      }
    }
  }
}

TEST(ReduceKernels, SpecialValuePairs) {
  const auto isas = available_isas();
  for (const TypeInfo& t : kTypes) {
    const Data d = special_pairs(t, true);
    std::vector<std::uint8_t> sum_want;
    for (ReduceOp op : kOps) {
      const auto want = op == ReduceOp::Avg ? sum_want : reference(t, op, d);
      if (op == ReduceOp::Sum) sum_want = want;
      for (const char* isa : isas) {
        const ReduceFn fn = reduce_function_for(isa, t.type, op);
        std::vector<std::uint8_t> out(d.n * t.size);
        fn(out.data(), d.a.data(), d.b.data(), d.n);
        ASSERT_TRUE(same_bits(t, out.data(), want.data(), d.a.data(), d.b.data(), d.n)) << label(t, op, isa);
      }
    }
  }
}

TEST(ReduceKernels, Commutative) {
  const auto isas = available_isas();
  for (const TypeInfo& t : kTypes) {
    Data d = random_data(t, 5000, 77);
    const Data sp = special_pairs(t, false);
    d.a.insert(d.a.end(), sp.a.begin(), sp.a.end());
    d.b.insert(d.b.end(), sp.b.begin(), sp.b.end());
    d.n += sp.n;
    for (ReduceOp op : kOps) {
      for (const char* isa : isas) {
        const ReduceFn fn = reduce_function_for(isa, t.type, op);
        std::vector<std::uint8_t> ab(d.n * t.size), ba(d.n * t.size);
        fn(ab.data(), d.a.data(), d.b.data(), d.n);
        fn(ba.data(), d.b.data(), d.a.data(), d.n);
        const bool minmax = op == ReduceOp::Min || op == ReduceOp::Max;
        for (std::size_t i = 0; i < d.n; ++i) {
          const std::uint64_t x = get(d.a.data(), i, t.size), y = get(d.b.data(), i, t.size);
          bool has_nan = false;
          if (t.kind == Kind::F16)
            has_nan = nan16(static_cast<std::uint16_t>(x)) || nan16(static_cast<std::uint16_t>(y));
          if (t.kind == Kind::BF16)
            has_nan = nanbf(static_cast<std::uint16_t>(x)) || nanbf(static_cast<std::uint16_t>(y));
          if (t.kind == Kind::F32)
            has_nan = nan32(static_cast<std::uint32_t>(x)) || nan32(static_cast<std::uint32_t>(y));
          if (t.kind == Kind::F64) has_nan = nan64(x) || nan64(y);
          if (!minmax && has_nan) continue;
          ASSERT_EQ(get(ab.data(), i, t.size), get(ba.data(), i, t.size))
              << label(t, op, isa) << " a=" << hex(x, t.size) << " b=" << hex(y, t.size);
        }
      }
    }
  }
}

TEST(ReduceKernels, IsasAgreeOnLargeRandomInput) {
  const auto isas = available_isas();
  for (const TypeInfo& t : kTypes) {
    const Data d = random_data(t, 1 << 16, 99);
    for (ReduceOp op : kOps) {
      std::vector<std::uint8_t> first;
      for (const char* isa : isas) {
        std::vector<std::uint8_t> out(d.n * t.size);
        reduce_function_for(isa, t.type, op)(out.data(), d.a.data(), d.b.data(), d.n);
        if (first.empty())
          first = out;
        else
          ASSERT_TRUE(same_bits(t, out.data(), first.data(), d.a.data(), d.b.data(), d.n)) << label(t, op, isa);
      }
    }
  }
}

TEST(ReduceKernels, HandPickedValues) {
  // fp32 min/max of zeros and NaN, through the public entry point.
  const float a[] = {-0.0f, 0.0f, NAN, 1.0f, -INFINITY, 2.0f};
  const float b[] = {0.0f, -0.0f, 1.0f, NAN, 3.0f, 2.0f};
  float out[6];
  reduce(out, a, b, 6, DataType::Float32, ReduceOp::Min);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(out[0]), 0x80000000u);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(out[1]), 0x80000000u);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(out[2]), 0x7FC00000u);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(out[3]), 0x7FC00000u);
  EXPECT_EQ(out[4], -INFINITY);
  EXPECT_EQ(out[5], 2.0f);
  reduce(out, a, b, 6, DataType::Float32, ReduceOp::Max);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(out[0]), 0u);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(out[1]), 0u);
  EXPECT_EQ(out[4], 3.0f);
  // Integer wrap-around.
  const std::int8_t i8a[] = {127, -128, 16, -1}, i8b[] = {1, -1, 16, -1};
  std::int8_t i8[4];
  reduce(i8, i8a, i8b, 4, DataType::Int8, ReduceOp::Sum);
  EXPECT_EQ(i8[0], -128);
  EXPECT_EQ(i8[1], 127);
  reduce(i8, i8a, i8b, 4, DataType::Int8, ReduceOp::Prod);
  EXPECT_EQ(i8[0], 127);
  EXPECT_EQ(i8[2], 0);  // 256 wraps to 0
  EXPECT_EQ(i8[3], 1);
  const std::uint64_t ua[] = {~0ull, 0x8000000000000000ull}, ub[] = {2, 1};
  std::uint64_t u64[2];
  reduce(u64, ua, ub, 2, DataType::Uint64, ReduceOp::Sum);
  EXPECT_EQ(u64[0], 1u);
  reduce(u64, ua, ub, 2, DataType::Uint64, ReduceOp::Min);
  EXPECT_EQ(u64[0], 2u);
  EXPECT_EQ(u64[1], 1u);
  const std::int64_t sa[] = {-5, 1ll << 40}, sb[] = {3, 3ll << 30};
  std::int64_t s64[2];
  reduce(s64, sa, sb, 2, DataType::Int64, ReduceOp::Max);
  EXPECT_EQ(s64[0], 3);
  reduce(s64, sa, sb, 2, DataType::Int64, ReduceOp::Prod);
  EXPECT_EQ(s64[0], -15);
  EXPECT_EQ(s64[1], 0);  // 3 * 2^70 wraps to 0
  // fp16: 1 + 2^-11 is a tie, rounds to even (1.0); 65504 + 16 rounds to inf.
  const std::uint16_t ha[] = {0x3C00, 0x7BFF, 0x7BFF}, hb[] = {0x1000, 0x4C00, 0x4800};
  std::uint16_t h[3];
  reduce(h, ha, hb, 3, DataType::Float16, ReduceOp::Sum);
  EXPECT_EQ(h[0], 0x3C00);
  EXPECT_EQ(h[1], 0x7C00);  // 65504 + 16 = 65520: tie, to inf
  EXPECT_EQ(h[2], 0x7BFF);  // 65504 + 8 = 65512 rounds down
  // Invalid arithmetic gives the x86 default NaN; a NaN operand is kept, quieted, `a` first.
  const float na[] = {INFINITY, std::bit_cast<float>(0x7F800001u), std::bit_cast<float>(0x7FC00001u), 1.0f};
  const float nb[] = {-INFINITY, std::bit_cast<float>(0xFFC00002u), 1.0f, std::bit_cast<float>(0xFF800003u)};
  reduce(out, na, nb, 4, DataType::Float32, ReduceOp::Sum);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(out[0]), 0xFFC00000u);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(out[1]), 0x7FC00001u);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(out[2]), 0x7FC00001u);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(out[3]), 0xFFC00003u);
}

TEST(ReduceKernels, AvgIsSumAndZeroCount) {
  for (const TypeInfo& t : kTypes) {
    EXPECT_EQ(reduce_function(t.type, ReduceOp::Avg), reduce_function(t.type, ReduceOp::Sum));
    for (const char* isa : available_isas())
      EXPECT_EQ(reduce_function_for(isa, t.type, ReduceOp::Avg), reduce_function_for(isa, t.type, ReduceOp::Sum));
    // count 0 touches nothing (null pointers are fine).
    reduce(nullptr, nullptr, nullptr, 0, t.type, ReduceOp::Sum);
  }
}

TEST(ReduceKernels, InvalidArguments) {
  EXPECT_EQ(reduce_function(static_cast<DataType>(kDataTypeCount), ReduceOp::Sum), nullptr);
  EXPECT_EQ(reduce_function(DataType::Float32, static_cast<ReduceOp>(kReduceOpCount)), nullptr);
  EXPECT_EQ(reduce_function_for("scalar", static_cast<DataType>(200), ReduceOp::Sum), nullptr);
  EXPECT_EQ(reduce_function_for("avx1024", DataType::Float32, ReduceOp::Sum), nullptr);
  EXPECT_EQ(reduce_function_for(nullptr, DataType::Float32, ReduceOp::Sum), nullptr);
  float x = 0;
  try {
    reduce(&x, &x, &x, 1, static_cast<DataType>(99), ReduceOp::Sum);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  }
}

// ---------------------------------------------------------------------------
// divide.

std::uint64_t ref_divide(const TypeInfo& t, std::uint64_t x, int divisor) {
  const double v = static_cast<double>(static_cast<float>(divisor));
  switch (t.kind) {
    case Kind::F16: {
      const auto h = static_cast<std::uint16_t>(x);
      if (nan16(h)) return h | 0x0200;
      return enc16(static_cast<float>(dec16(h) / v));
    }
    case Kind::BF16: {
      const auto h = static_cast<std::uint16_t>(x);
      if (nanbf(h)) return h | 0x0040;
      return encbf(static_cast<float>(decbf(h) / v));
    }
    case Kind::F32: {
      const auto u = static_cast<std::uint32_t>(x);
      if (nan32(u)) return u | 0x00400000u;
      return std::bit_cast<std::uint32_t>(static_cast<float>(dec32(u) / v));
    }
    case Kind::F64:
      if (nan64(x)) return x | 0x0008000000000000ull;
      return std::bit_cast<std::uint64_t>(std::bit_cast<double>(x) / static_cast<double>(divisor));
    default: return 0;
  }
}

TEST(ReduceDivide, EveryFloatTypeAndIsa) {
  const auto isas = available_isas();
  for (const TypeInfo& t : kTypes) {
    if (!is_float(t.kind)) continue;
    Data d = random_data(t, 5000, 5);
    const Data sp = special_pairs(t, false);
    d.a.insert(d.a.end(), sp.a.begin(), sp.a.end());
    d.n += sp.n;
    if (t.size == 2) {  // every fp16 / bf16 bit pattern
      d.a.resize((d.n + 65536) * 2);
      for (std::uint64_t h = 0; h < 65536; ++h) put(d.a.data(), d.n + h, 2, h);
      d.n += 65536;
    }
    for (int divisor : {1, 2, 3, 7, -3, 1000, 12345}) {
      std::vector<std::uint8_t> want(d.n * t.size);
      for (std::size_t i = 0; i < d.n; ++i)
        put(want.data(), i, t.size, ref_divide(t, get(d.a.data(), i, t.size), divisor));
      for (const char* isa : isas) {
        const DivideFn fn = divide_function_for(isa, t.type);
        ASSERT_NE(fn, nullptr);
        for (std::size_t n : {0u, 1u, 2u, 3u, 5u, 7u, 8u, 9u, 15u, 16u, 17u, 31u, 33u, 63u, 64u, 65u, 130u, 4099u}) {
          for (std::size_t offset : {0u, 1u}) {
            std::vector<std::uint8_t> buf((n + 2) * t.size, 0x5A);
            std::memcpy(buf.data() + offset * t.size, d.a.data(), n * t.size);
            fn(buf.data() + offset * t.size, n, divisor);
            ASSERT_TRUE(same_bits(t, buf.data() + offset * t.size, want.data(), d.a.data(), d.a.data(), n))
                << to_string(t.type) << " / " << divisor << " " << isa << " n=" << n;
            for (std::size_t i = 0; i < buf.size(); ++i)
              if (i < offset * t.size || i >= (offset + n) * t.size) {
                ASSERT_EQ(buf[i], 0x5A) << "byte " << i;
              }
          }
        }
        // Whole array.
        std::vector<std::uint8_t> all = d.a;
        fn(all.data(), d.n, divisor);
        ASSERT_TRUE(same_bits(t, all.data(), want.data(), d.a.data(), d.a.data(), d.n)) << isa;
      }
      // The public entry point.
      std::vector<std::uint8_t> all = d.a;
      divide(all.data(), d.n, t.type, divisor);
      ASSERT_TRUE(same_bits(t, all.data(), want.data(), d.a.data(), d.a.data(), d.n));
    }
  }
}

TEST(ReduceDivide, RejectsIntegersAndZero) {
  std::int32_t x[4] = {4, 8, 12, 16};
  for (const TypeInfo& t : kTypes) {
    if (is_float(t.kind)) continue;
    for (const char* isa : available_isas()) EXPECT_EQ(divide_function_for(isa, t.type), nullptr);
    try {
      divide(x, 1, t.type, 2);
      ADD_FAILURE() << "no throw for " << to_string(t.type);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    }
  }
  EXPECT_EQ(x[0], 4);
  float f = 1;
  try {
    divide(&f, 1, DataType::Float32, 0);
    ADD_FAILURE() << "no throw for divisor 0";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  }
  const float halves[] = {3.0f};
  float g = halves[0];
  divide(&g, 1, DataType::Float32, 2);
  EXPECT_EQ(g, 1.5f);
}

// ---------------------------------------------------------------------------
// ISA selection.

TEST(ReduceIsa, ChooseCapsAndWarns) {
  std::string warning;
  EXPECT_STREQ(detail::choose_reduce_isa(nullptr, "avx512", warning), "avx512");
  EXPECT_TRUE(warning.empty());
  EXPECT_STREQ(detail::choose_reduce_isa("", "avx2", warning), "avx2");
  EXPECT_TRUE(warning.empty());
  EXPECT_STREQ(detail::choose_reduce_isa("scalar", "avx512", warning), "scalar");
  EXPECT_TRUE(warning.empty());
  EXPECT_STREQ(detail::choose_reduce_isa("avx2", "avx512", warning), "avx2");
  EXPECT_TRUE(warning.empty());
  EXPECT_STREQ(detail::choose_reduce_isa("avx512", "avx512", warning), "avx512");
  EXPECT_TRUE(warning.empty());
  EXPECT_STREQ(detail::choose_reduce_isa("avx512", "avx2", warning), "avx2");
  EXPECT_NE(warning.find("at most avx2"), std::string::npos) << warning;
  EXPECT_STREQ(detail::choose_reduce_isa("avx2", "scalar", warning), "scalar");
  EXPECT_FALSE(warning.empty());
  EXPECT_STREQ(detail::choose_reduce_isa("sse9", "avx2", warning), "avx2");
  EXPECT_NE(warning.find("ignoring"), std::string::npos) << warning;
}

TEST(ReduceIsa, BestAndAvailable) {
  const char* best = detail::best_reduce_isa();
  const std::string b = best;
  EXPECT_TRUE(b == "scalar" || b == "avx2" || b == "avx512") << b;
  const char* env = std::getenv("RDMX_REDUCE_ISA");
  std::string warning;
  EXPECT_STREQ(reduce_isa(), detail::choose_reduce_isa(env, best, warning));
  EXPECT_NE(reduce_function_for("scalar", DataType::Float32, ReduceOp::Sum), nullptr);
  EXPECT_EQ(reduce_function_for("avx2", DataType::Float32, ReduceOp::Sum) != nullptr, b != "scalar");
  EXPECT_EQ(reduce_function_for("avx512", DataType::Float32, ReduceOp::Sum) != nullptr, b == "avx512");
  // reduce_function follows reduce_isa().
  EXPECT_EQ(reduce_function(DataType::BFloat16, ReduceOp::Max),
            reduce_function_for(reduce_isa(), DataType::BFloat16, ReduceOp::Max));
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) {
    EXPECT_EQ(b, "avx512");
  }
  std::printf("reduction ISA: %s (best %s)\n", reduce_isa(), best);
#endif
}

// RDMX_REDUCE_ISA end to end, in a fresh process (the choice is cached).
int isa_in_child(const char* value) {
  ::setenv("RDMX_REDUCE_ISA", value, 1);
  std::fprintf(stderr, "isa=%s\n", reduce_isa());
  std::fflush(stderr);
  std::_Exit(0);
}

TEST(ReduceIsa, EnvironmentCapsInFreshProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // re-executes the binary: nothing cached
  EXPECT_EXIT(isa_in_child("scalar"), ::testing::ExitedWithCode(0), "isa=scalar");
  EXPECT_EXIT(isa_in_child("bogus"), ::testing::ExitedWithCode(0),
              std::string("ignoring RDMX_REDUCE_ISA(.|\n)*isa=") + detail::best_reduce_isa());
  if (std::string(detail::best_reduce_isa()) != "scalar") {
    EXPECT_EXIT(isa_in_child("avx2"), ::testing::ExitedWithCode(0), "isa=avx2");
  }
  if (std::string(detail::best_reduce_isa()) != "avx512") {
    EXPECT_EXIT(isa_in_child("avx512"), ::testing::ExitedWithCode(0),
                std::string("at most(.|\n)*isa=") + detail::best_reduce_isa());
  }
}

}  // namespace
}  // namespace rdmx::coll
