// SPDX-License-Identifier: MIT
// What ranks tell each other of where they run, and how long their
// collectives spin before they sleep.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "coll/rank_placement.hpp"

namespace rdmx::coll {
namespace {

TEST(RankPlacement, WhereARankRunsTravelsWhole) {
  const RankWhere here = RankWhere::here(std::nullopt, "tcp:eth1/10.0.1.2:4242");
  EXPECT_FALSE(here.boot_id.empty());
  EXPECT_EQ(here.identity, here.name + "/" + here.boot_id);
  const RankWhere back = RankWhere::decode(here.encode());
  EXPECT_EQ(back.identity, here.identity);
  EXPECT_EQ(back.name, here.name);
  EXPECT_EQ(back.boot_id, here.boot_id);
  EXPECT_EQ(back.device, "tcp:eth1/10.0.1.2:4242");
  EXPECT_EQ(back.numa_node, here.numa_node);
  EXPECT_EQ(RankWhere::here(std::string("rack7"), "").identity, "rack7");
  // An entry with fields missing (a truncated value) leaves them empty.
  const RankWhere partial = RankWhere::decode("id\nname");
  EXPECT_EQ(partial.identity, "id");
  EXPECT_EQ(partial.name, "name");
  EXPECT_TRUE(partial.boot_id.empty());
  EXPECT_EQ(partial.numa_node, -1);
}

TEST(RankPlacement, WaitersSpinLongerOnlyWithTwoCoresPerRank) {
  ::unsetenv("RDMX_SPIN_US");
  const WaitPolicy roomy = wait_policy(8, 16);
  EXPECT_EQ(roomy.spin, std::chrono::milliseconds(20));
  EXPECT_NE(roomy.why.find("8 ranks on this machine's 16 cores"), std::string::npos) << roomy.why;
  const WaitPolicy full = wait_policy(16, 16);
  EXPECT_LT(full.spin, roomy.spin);
  EXPECT_LT(wait_policy(2, 2).spin, roomy.spin);
  ::setenv("RDMX_SPIN_US", "50", 1);
  const WaitPolicy chosen = wait_policy(1, 16);
  EXPECT_LT(chosen.spin, roomy.spin) << "RDMX_SPIN_US, when set, decides";
  EXPECT_NE(chosen.why.find("RDMX_SPIN_US is set"), std::string::npos) << chosen.why;
  ::unsetenv("RDMX_SPIN_US");
}

}  // namespace
}  // namespace rdmx::coll
