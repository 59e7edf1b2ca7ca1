// SPDX-License-Identifier: MIT
// rdmx perf fabric's conclusions (tools/rdmx/report/fabric_report.cpp), in
// process on figures given directly; the bed test (tests/bed) measures.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "json_schema.hpp"
#include "report/fabric_report.hpp"
#include "support/text.hpp"

namespace rdmx::test {
namespace {

using cli::fabric::Analysis;
using cli::fabric::Link;

// Each rank alone on host h<rank>, NIC eth<rank>; every pair both ways at
// `fast`, except the links of rank `slow_rank` (-1: none) at `slow`.
Analysis pairs_among(int ranks, int slow_rank, double fast, double slow) {
  Analysis a;
  for (int from = 0; from < ranks; ++from) {
    for (int to = 0; to < ranks; ++to) {
      if (from == to) continue;
      const bool through = from == slow_rank || to == slow_rank;
      a.links.push_back({.pattern = "pairs",
                         .from = from,
                         .to = to,
                         .from_host = "h" + std::to_string(from),
                         .to_host = "h" + std::to_string(to),
                         .device = "tcp:eth" + std::to_string(from),
                         .interface = "eth" + std::to_string(from),
                         .to_interface = "eth" + std::to_string(to),
                         .gbps = through ? slow : fast,
                         .line_gbps = 1.25});
    }
  }
  return a;
}

nlohmann::json with_run_fields(nlohmann::json doc) {
  doc["schema"] = "rdmx.perf_fabric/1";
  doc["ranks"] = 3;
  doc["hosts"] = {"h0", "h1", "h2"};
  doc["message_bytes"] = 1 << 20;
  return doc;
}

// Most links cross the slow NIC (4 of 6): judged against the median they
// would all pass; against the upper quartile they are named, and so is the
// rank they all go through.
TEST(FabricReport, ARankWhoseEveryLinkIsSlowIsNamedEvenWhenMostLinksAre) {
  const auto doc = cli::fabric::analyse(pairs_among(3, 2, 0.12, 0.03));
  expect_valid(with_run_fields(doc), "perf_fabric.schema.json");
  ASSERT_EQ(doc["outliers"].size(), 4u) << doc.dump(1);
  for (const auto& link : doc["links"]) {
    EXPECT_EQ(link["outlier"].get<bool>(), link["from"] == 2 || link["to"] == 2) << link.dump();
  }
  ASSERT_EQ(doc["suspects"].size(), 1u) << doc.dump(1);
  EXPECT_EQ(doc["suspects"][0]["rank"], 2);
  EXPECT_EQ(doc["suspects"][0]["interface"], "eth2");
  const std::string text = cli::fabric::describe(doc);
  EXPECT_TRUE(contains(text, "suspect: rank 2 (h2 eth2): every link through it is at most 0.25x")) << text;
  EXPECT_TRUE(contains(text, "slow link: pairs: rank 0 (h0 eth0) -> rank 2 (h2 eth2) at 0.030 GB/s")) << text;
}

TEST(FabricReport, EvenLinksNameNothing) {
  const auto doc = cli::fabric::analyse(pairs_among(4, -1, 0.12, 0.12));
  EXPECT_TRUE(doc["outliers"].empty()) << doc.dump(1);
  EXPECT_TRUE(doc["suspects"].empty()) << doc.dump(1);
  EXPECT_TRUE(contains(cli::fabric::describe(doc), "no link below 0.70x its pattern's reference"));
  EXPECT_NEAR(doc["links"][0]["of_line_rate"].get<double>(), 0.12 / 1.25, 1e-9);
}

// Two ranks: the two directions are compared with each other, but nothing
// tells which end is at fault.
TEST(FabricReport, TwoRanksNameASlowDirectionButNoSuspect) {
  Analysis a = pairs_among(2, -1, 0.12, 0.12);
  a.links[1].gbps = 0.02;
  const auto doc = cli::fabric::analyse(a);
  EXPECT_EQ(doc["outliers"].size(), 1u) << doc.dump(1);
  EXPECT_TRUE(doc["suspects"].empty()) << doc.dump(1);
}

// Two hosts of two ranks on two rails, the rail-1 cable of host 1 slow, as
// on the bed: a pair across rails rides the rail the routes pick (0-3 went
// over rail 0 and was fast, 1-2 over rail 1 and was slow), so judged from
// all pairs rank 1 alone looked guilty. Within each rail the only slow link
// joins ranks 1 and 3, and both are named as its two ends.
TEST(FabricReport, LinksAcrossRailsDoNotPickTheSuspect) {
  Analysis a;
  auto add = [&a](int from, int to, double gbps) {
    const int nic_from = from % 2;
    const int nic_to = to % 2;
    a.links.push_back({.pattern = "pairs",
                       .from = from,
                       .to = to,
                       .from_host = "h" + std::to_string(from / 2),
                       .to_host = "h" + std::to_string(to / 2),
                       .interface = "nic" + std::to_string(nic_from),
                       .to_interface = "nic" + std::to_string(nic_to),
                       .gbps = gbps,
                       .across_networks = nic_from != nic_to});
  };
  for (const auto& [x, y, gbps] : {std::tuple{0, 2, 0.12}, {1, 3, 0.012}, {0, 3, 0.10}, {1, 2, 0.012}}) {
    add(x, y, gbps);
    add(y, x, gbps);
  }
  const auto doc = cli::fabric::analyse(a);
  expect_valid(with_run_fields(doc), "perf_fabric.schema.json");
  ASSERT_EQ(doc["suspects"].size(), 2u) << doc.dump(1);
  EXPECT_EQ(doc["suspects"][0]["rank"], 1);
  EXPECT_EQ(doc["suspects"][1]["rank"], 3);
  const std::string text = cli::fabric::describe(doc);
  EXPECT_TRUE(contains(text, "within its network all end at rank 3, also named: either end")) << text;
  EXPECT_TRUE(contains(text, "(across networks)")) << text;
  EXPECT_TRUE(contains(text, "suspects come from links within one network only")) << text;
}

TEST(FabricReport, NoLinkBetweenHostsSaysSo) {
  const auto doc = cli::fabric::analyse(Analysis{});
  EXPECT_TRUE(contains(cli::fabric::describe(doc), "no link between hosts")) << cli::fabric::describe(doc);
}

}  // namespace
}  // namespace rdmx::test
