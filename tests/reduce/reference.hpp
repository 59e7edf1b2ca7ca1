// SPDX-License-Identifier: MIT
// The reduction tests' reference model, independent of the code under test:
// values decoded and encoded here (fp16/bf16/fp32 by ldexp, rounding by
// nearbyint in double), one element reduced on raw bits, and the test data
// (special values, random mixes) with the checks that compare kernels to it.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "coll/reduce.hpp"

namespace rdmx::coll::ref {

enum class Kind { SInt, UInt, F16, BF16, F32, F64 };
struct TypeInfo {
  DataType type;
  Kind kind;
  std::size_t size;
};
constexpr TypeInfo kTypes[] = {
    {DataType::Int8, Kind::SInt, 1},   {DataType::Uint8, Kind::UInt, 1},    {DataType::Int32, Kind::SInt, 4},
    {DataType::Uint32, Kind::UInt, 4}, {DataType::Int64, Kind::SInt, 8},    {DataType::Uint64, Kind::UInt, 8},
    {DataType::Float16, Kind::F16, 2}, {DataType::BFloat16, Kind::BF16, 2}, {DataType::Float32, Kind::F32, 4},
    {DataType::Float64, Kind::F64, 8},
};
constexpr ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg};
constexpr const char* kIsas[] = {"scalar", "avx2", "avx512"};

bool is_float(Kind k);
// The ISAs this CPU has (reduce_function_for non-null).
std::vector<const char*> available_isas();

// Decoders (finite or inf; not NaN) and NaN tests.
double dec16(std::uint16_t h);
double decbf(std::uint16_t h);
double dec32(std::uint32_t u);
bool nan16(std::uint16_t h);
bool nanbf(std::uint16_t h);
bool nan32(std::uint32_t u);
bool nan64(std::uint64_t u);
// Encoders, round to nearest even.
std::uint16_t enc16(double v);
std::uint16_t encbf(double v);
// The conversions, by the reference and by the CPU's F16C instructions.
std::uint32_t ref_half_to_float_bits(std::uint16_t h);
std::uint16_t ref_float_to_half(std::uint32_t u);
std::uint16_t ref_float_to_bf16(std::uint32_t u);
bool has_f16c();
std::uint32_t f16c_half_to_float_bits(std::uint16_t h);
std::uint16_t f16c_float_to_half(float f);

// Element `i` of `size` bytes, as raw bits.
std::uint64_t get(const std::uint8_t* p, std::size_t i, std::size_t size);
void put(std::uint8_t* p, std::size_t i, std::size_t size, std::uint64_t v);
std::string hex(std::uint64_t v, std::size_t size);

struct Data {
  std::vector<std::uint8_t> a, b;
  std::size_t n = 0;
};
Data random_data(const TypeInfo& t, std::size_t n, std::uint64_t seed);
// Every pair of the type's special values (with `sweep`: fp16/bf16 also
// every pattern against a few partners).
Data special_pairs(const TypeInfo& t, bool sweep);
// The reference result of op over d, element by element.
std::vector<std::uint8_t> reference(const TypeInfo& t, ReduceOp op, const Data& d);
// got[0..n) == want[0..n) bitwise; the first mismatch is described.
::testing::AssertionResult same_bits(const TypeInfo& t, const std::uint8_t* got, const std::uint8_t* want,
                                     const std::uint8_t* a, const std::uint8_t* b, std::size_t n);
std::string label(const TypeInfo& t, ReduceOp op, const char* isa);
// Runs fn on [offset, offset+n) of d into a destination at dst_offset, with
// canaries around it, and compares with want; also dst == a and dst == b.
::testing::AssertionResult check_run(const TypeInfo& t, ReduceFn fn, const Data& d,
                                     const std::vector<std::uint8_t>& want, std::size_t offset, std::size_t n,
                                     std::size_t dst_offset);

}  // namespace rdmx::coll::ref
