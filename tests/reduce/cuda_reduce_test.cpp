// SPDX-License-Identifier: MIT
// The GPU reduction kernels (src/coll/cuda) against the same reference as
// the CPU's: every type and op, special values and random data, pointers
// anywhere inside an allocation, the result bit for bit. They need a GPU
// and skip without one; the refusals at the end run everywhere.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "coll/cuda/kernels.hpp"
#include "coll/reduce.hpp"
#include "rdmx/error.hpp"
#include "reduce/reference.hpp"
#include "support/cuda_device.hpp"

namespace rdmx::coll {
namespace {

using namespace ref;
using test::cuda_copy;
using test::DeviceBuffer;

std::vector<std::uint8_t> run_on_gpu(const TypeInfo& t, ReduceOp op, const Data& d, std::size_t offset) {
  const std::size_t bytes = d.n * t.size;
  // One allocation holds all three, each `offset` elements into its third,
  // as a caching allocator hands out pointers inside larger blocks.
  const std::size_t third = bytes + 64 * t.size;
  DeviceBuffer buffer(3 * third);
  auto* base = static_cast<std::uint8_t*>(buffer.get());
  std::uint8_t* a = base + offset * t.size;
  std::uint8_t* b = base + third + offset * t.size;
  std::uint8_t* dst = base + 2 * third + offset * t.size;
  cuda_copy(a, d.a.data(), bytes);
  cuda_copy(b, d.b.data(), bytes);
  cuda_reduce(dst, a, b, d.n, t.type, op, nullptr);
  if (op == ReduceOp::Avg) cuda_divide(dst, d.n, t.type, 3, nullptr);
  std::vector<std::uint8_t> out(bytes);
  cuda_copy(out.data(), dst, bytes);  // cuMemcpy waits for the kernels on the legacy stream
  return out;
}

std::vector<std::uint8_t> run_on_cpu(const TypeInfo& t, ReduceOp op, const Data& d) {
  std::vector<std::uint8_t> out(d.n * t.size);
  reduce(out.data(), d.a.data(), d.b.data(), d.n, t.type, op);
  if (op == ReduceOp::Avg) divide(out.data(), d.n, t.type, 3);
  return out;
}

TEST(CudaReduce, EveryTypeAndOpGivesTheCpusBits) {
  RDMX_REQUIRE_GPU();
  ASSERT_TRUE(cuda_kernels_built()) << cuda_kernels_note();
  for (const TypeInfo& t : kTypes) {
    Data d = random_data(t, 100003, 31 + static_cast<unsigned>(t.type));
    const Data sp = special_pairs(t, true);
    d.a.insert(d.a.end(), sp.a.begin(), sp.a.end());
    d.b.insert(d.b.end(), sp.b.begin(), sp.b.end());
    d.n += sp.n;
    for (ReduceOp op : kOps) {
      if (op == ReduceOp::Avg && !is_float(t.kind)) continue;
      const auto want = op == ReduceOp::Avg ? run_on_cpu(t, op, d) : reference(t, op, d);
      for (std::size_t offset : {0u, 1u, 7u}) {
        const auto got = run_on_gpu(t, op, d, offset);
        ASSERT_TRUE(same_bits(t, got.data(), want.data(), d.a.data(), d.b.data(), d.n))
            << label(t, op, "cuda") << " offset=" << offset;
      }
    }
  }
}

TEST(CudaReduce, InPlaceAndShortCounts) {
  RDMX_REQUIRE_GPU();
  const TypeInfo& t = kTypes[8];  // fp32
  ASSERT_EQ(t.type, DataType::Float32);
  for (std::size_t n : {1u, 2u, 255u, 256u, 257u, 1000000u}) {
    const Data d = random_data(t, n, n);
    const auto want = reference(t, ReduceOp::Sum, d);
    DeviceBuffer a(n * 4), b(n * 4);
    cuda_copy(a.get(), d.a.data(), n * 4);
    cuda_copy(b.get(), d.b.data(), n * 4);
    cuda_reduce(a.get(), a.get(), b.get(), n, t.type, ReduceOp::Sum, nullptr);  // dst == a
    std::vector<std::uint8_t> got(n * 4);
    cuda_copy(got.data(), a.get(), n * 4);
    ASSERT_TRUE(same_bits(t, got.data(), want.data(), d.a.data(), d.b.data(), n)) << "n=" << n;
  }
}

// Everywhere: host memory, a bad type or op, an integer average and a zero
// divisor are refused with the reason; without a GPU or kernels, the error
// says which is missing.
TEST(CudaReduce, RefusesWhatItCannotReduce) {
  float host[4] = {1, 2, 3, 4};
  try {
    cuda_reduce(host, host, host, 4, DataType::Float32, ReduceOp::Sum, nullptr);
    FAIL() << "host memory reduced on a GPU";
  } catch (const Error& e) {
    std::string why;
    if (test::cuda_for_test(&why) == nullptr || !cuda_kernels_built()) {
      EXPECT_EQ(e.code(), ErrorCode::NotSupported) << e.what();
      const std::string expected = cuda_kernels_built() ? why : cuda_kernels_note();
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    } else {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("not CUDA device memory"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(cuda_reduce(host, host, host, 4, static_cast<DataType>(kDataTypeCount), ReduceOp::Sum, nullptr), Error);
  EXPECT_THROW(cuda_reduce(host, host, host, 4, DataType::Float32, static_cast<ReduceOp>(kReduceOpCount), nullptr),
               Error);
  EXPECT_THROW(cuda_divide(host, 4, DataType::Int32, 2, nullptr), Error);
  EXPECT_THROW(cuda_divide(host, 4, DataType::Float32, 0, nullptr), Error);
  // Nothing to do is not an error, and touches nothing.
  cuda_reduce(nullptr, nullptr, nullptr, 0, DataType::Float32, ReduceOp::Sum, nullptr);
  EXPECT_EQ(host[0], 1.0f);
}

}  // namespace
}  // namespace rdmx::coll
