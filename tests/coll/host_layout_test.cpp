// SPDX-License-Identifier: MIT
// The host layout a communicator learns, and how it steers the choice of
// the hierarchical algorithms.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "coll/host_layout.hpp"
#include "coll/selection.hpp"
#include "rdmx/error.hpp"

namespace rdmx::coll {
namespace {

TEST(HostLayout, HostsAreNumberedByTheirLowestRankAndKeepRankOrder) {
  // Ranks interleaved over two hosts, as a launcher that places round-robin would.
  const HostLayout layout = make_host_layout({"b", "a", "b", "a"}, {"hb", "ha", "hb", "ha"});
  ASSERT_EQ(layout.hosts(), 2);
  EXPECT_EQ(layout.per_host(), 2);
  EXPECT_EQ(layout.ranks[0], (std::vector<int>{0, 2}));
  EXPECT_EQ(layout.ranks[1], (std::vector<int>{1, 3}));
  EXPECT_EQ(layout.host_of, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(layout.local_of, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(layout.rank_at(1, 1), 3);
  EXPECT_EQ(layout.describe(), "2 hosts x 2 ranks: hb [0 2], ha [1 3]");
  EXPECT_EQ(layout.describe_rings(),
            "within hosts: 0->2->0 1->3->1; across hosts, one per local index: 0->1->0 2->3->2");
}

TEST(HostLayout, UnequalHostsHaveNoRanksPerHost) {
  const HostLayout layout = make_host_layout({"a", "a", "a", "b"}, {"x", "x", "x", "y"});
  EXPECT_EQ(layout.hosts(), 2);
  EXPECT_EQ(layout.per_host(), 0);
  EXPECT_NE(layout.describe().find("unequal"), std::string::npos);
  EXPECT_NE(layout.describe_rings().find("unequal"), std::string::npos);
}

TEST(AlgoSelection, HierarchicalAllReduceOnSeveralHostsOfSeveralRanksFromItsThreshold) {
  AlgoSelector table("");
  table.set_layout(2, 4);
  EXPECT_EQ(table.choose(CollOp::AllReduce, 256 * 1024, 8), Algo::Hierarchical);
  EXPECT_EQ(table.choose(CollOp::AllReduce, 64 << 20, 8), Algo::Hierarchical);
  EXPECT_EQ(table.choose(CollOp::AllReduce, 4, 8), Algo::RecursiveDoubling);
  EXPECT_NE(table.explain(CollOp::AllReduce, 1 << 20, 8).find("2 hosts x 4"), std::string::npos);
  for (auto [hosts, per_host] : {std::pair{1, 8}, std::pair{8, 1}, std::pair{2, 0}}) {
    AlgoSelector other("");
    other.set_layout(hosts, per_host);
    EXPECT_NE(other.choose(CollOp::AllReduce, 64 << 20, 8), Algo::Hierarchical) << hosts << " hosts x " << per_host;
  }
}

// On one host halving-doubling moves the ring's bytes in fewer steps, until
// its first exchange outgrows a peer's staging area (RDMX_COLL_BUFFSIZE),
// beyond which it was measured behind the ring; at 2 ranks the two are one
// exchange each way, and the ring's row comes first.
TEST(AlgoSelection, FlatAllReduceByRoundsOnOneHost) {
  AlgoSelector table("");
  table.set_layout(1, 8);
  EXPECT_EQ(table.choose(CollOp::AllReduce, 16 * 1024, 8), Algo::RecursiveDoubling);
  EXPECT_EQ(table.choose(CollOp::AllReduce, 1 << 20, 8), Algo::HalvingDoubling);
  EXPECT_EQ(table.choose(CollOp::AllReduce, 4 << 20, 8), Algo::HalvingDoubling);
  EXPECT_EQ(table.choose(CollOp::AllReduce, 8 << 20, 8), Algo::HalvingDoubling);
  EXPECT_EQ(table.choose(CollOp::AllReduce, 16 << 20, 8), Algo::Ring);
  EXPECT_EQ(table.choose(CollOp::AllReduce, 64 << 20, 8), Algo::Ring);
  LinkModel larger_staging;
  larger_staging.staging_bytes = 64 << 20;
  table.set_links(larger_staging);
  EXPECT_EQ(table.choose(CollOp::AllReduce, 64 << 20, 8), Algo::HalvingDoubling);
  EXPECT_EQ(table.choose(CollOp::AllReduce, 1 << 20, 2), Algo::Ring);
}

// Over tcp each step costs more: whole-vector exchanges pay off further
// (2 ranks: the same bytes as the ring in half the steps).
TEST(AlgoSelection, RecursiveDoublingReachesFurtherOverANetwork) {
  AlgoSelector local("");
  local.set_layout(1, 4);
  AlgoSelector network("");
  network.set_layout(1, 4);
  network.set_links(declared_links({25, 1.25}, {25, 1.25}));  // tcp carries the links
  EXPECT_EQ(local.choose(CollOp::AllReduce, 64 * 1024, 4), Algo::RecursiveDoubling);
  EXPECT_EQ(local.choose(CollOp::AllReduce, 128 * 1024, 2), Algo::Ring);
  EXPECT_EQ(network.choose(CollOp::AllReduce, 256 * 1024, 2), Algo::RecursiveDoubling);
  EXPECT_EQ(network.choose(CollOp::AllReduce, 512 * 1024, 2), Algo::Ring);
  EXPECT_EQ(network.choose(CollOp::AllReduce, 128 * 1024, 4), Algo::HalvingDoubling);
  EXPECT_EQ(network.choose(CollOp::AllReduce, 128 * 1024, 8), Algo::HalvingDoubling);
  EXPECT_EQ(network.choose(CollOp::AllReduce, 16 * 1024, 8), Algo::RecursiveDoubling);
  EXPECT_NE(network.explain(CollOp::AllReduce, 4, 2).find("in-host 34.5 us/1.25 GB/s"), std::string::npos);
}

TEST(AlgoSelection, ForcedHierarchicalOnUnequalHostsIsAConfigError) {
  AlgoSelector forced("all_reduce:hier");
  try {
    forced.set_layout(2, 0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Config);
    EXPECT_NE(std::string(e.what()).find("unequal rank counts"), std::string::npos) << e.what();
  }
  AlgoSelector fine("hier");
  fine.set_layout(1, 3);  // one host: the hierarchy is the host's ring
  for (CollOp op : {CollOp::AllReduce, CollOp::AllGather, CollOp::ReduceScatter, CollOp::Broadcast, CollOp::Reduce}) {
    EXPECT_EQ(fine.choose(op, 4, 3), Algo::Hierarchical) << to_string(op);
  }
  EXPECT_EQ(fine.choose(CollOp::AllToAll, 4, 3), Algo::Direct);
  EXPECT_THROW(AlgoSelector("all_to_all:hier"), Error);
}

}  // namespace
}  // namespace rdmx::coll
