// SPDX-License-Identifier: MIT
// Memory keys and nonces come from the kernel's random source: draws do not
// repeat and every bit takes both values (a constant, a counter or a
// truncated generator would fail one of these).
#include <gtest/gtest.h>

#include <cstdint>
#include <set>

#include "services/kernel_random.hpp"

namespace rdmx::core {
namespace {

TEST(KernelRandom, DrawsDoNotRepeatAndEveryBitVaries) {
  std::set<std::uint64_t> seen;
  std::uint64_t any = 0, all = ~std::uint64_t{0};
  for (int i = 0; i < 512; ++i) {
    const std::uint64_t v = kernel_random64();
    seen.insert(v);
    any |= v;
    all &= v;
  }
  EXPECT_EQ(seen.size(), 512u);
  EXPECT_EQ(any, ~std::uint64_t{0});
  EXPECT_EQ(all, 0u);
}

}  // namespace
}  // namespace rdmx::core
