// SPDX-License-Identifier: MIT
// rdmx bench's summary (tools/rdmx/report/bench_summary.cpp), in process on results
// documents: it leads with WRITE latency and the WRITE bandwidth of messages
// beyond the last-level cache, not a READ from mapped memory or a copy that
// fits in the cache, and it marks figures whose rounds spread.
#include <gtest/gtest.h>

#include <string>

#include "json_schema.hpp"
#include "report/bench_summary.hpp"

namespace rdmx::test {
namespace {

using nlohmann::json;

json lat_row(std::uint64_t bytes, double typical) {
  return {{"bytes", bytes},          {"iterations", 1000},      {"t_min_us", typical},
          {"t_max_us", typical * 3}, {"t_typical_us", typical}, {"t_avg_us", typical},
          {"t_stdev_us", 0.1},       {"p99_us", typical * 2},   {"p999_us", typical * 3}};
}

json bw_row(std::uint64_t bytes, double gb_s) {
  return {{"bytes", bytes},
          {"iterations", 64},
          {"bw_peak_mib_s", gb_s * 1e9 / 1048576},
          {"bw_avg_mib_s", gb_s * 1e9 / 1048576},
          {"msg_rate_mpps", gb_s * 1e3 / static_cast<double>(bytes)},
          {"bw_avg_gb_s", gb_s}};
}

// shm as a same-host bench sees it: a READ from mapped memory far below a
// WRITE's latency, and 117 GB/s while 1 MiB stays in a 32 MiB cache.
json sample(double tcp_write_lat_round3) {
  const std::uint64_t mib = 1u << 20;
  json p2p = json::array();
  for (const double shm_lat : {0.50, 0.52, 0.51}) {
    p2p.push_back({{"provider", "shm"}, {"test", "write_lat"}, {"results", {lat_row(2, shm_lat)}}});
    p2p.push_back({{"provider", "shm"}, {"test", "read_lat"}, {"results", {lat_row(2, 0.04)}}});
  }
  for (const double tcp_lat : {6.5, 6.6, tcp_write_lat_round3}) {
    p2p.push_back({{"provider", "tcp"}, {"test", "write_lat"}, {"results", {lat_row(2, tcp_lat)}}});
  }
  p2p.push_back({{"provider", "shm"}, {"test", "read_bw"}, {"results", {bw_row(mib, 117.0)}}});
  p2p.push_back({{"provider", "shm"}, {"test", "write_bw"}, {"results", {bw_row(mib, 91.0)}}});
  p2p.push_back({{"provider", "tcp"}, {"test", "write_bw"}, {"results", {bw_row(mib, 1.9)}}});
  for (const double shm_bw : {9.0, 9.2, 8.9}) {
    p2p.push_back({{"provider", "shm"}, {"test", "write_bw"}, {"results", {bw_row(64 * mib, shm_bw)}}});
  }
  for (const double tcp_bw : {1.6, 1.5, 1.62}) {
    p2p.push_back({{"provider", "tcp"}, {"test", "write_bw"}, {"results", {bw_row(64 * mib, tcp_bw)}}});
  }
  json doc = {
      {"ranks", 2},
      {"host", {{"hostname", "vm"}, {"cores", 2}, {"logical_cpus", 2}, {"numa_nodes", 1}, {"llc_bytes", 32 * mib}}},
      {"providers", json::array({{{"name", "shm"}, {"usable", true}, {"reason", ""}, {"device", "shm0"}},
                                 {{"name", "tcp"}, {"usable", true}, {"reason", ""}, {"device", "tcp0"}}})},
      {"p2p", cli::merge_rounds(p2p)},
      {"coll", json::array()},
      {"errors", json::array()}};
  doc["summary"] = cli::summarize(doc, {"shm", "tcp"});
  return doc;
}

TEST(BenchSummary, RoundsMergeIntoTheMedianWithTheirSpread) {
  const json doc = sample(6.4);
  // shm write_lat, read_lat, read_bw and write_bw; tcp write_lat and write_bw.
  ASSERT_EQ(doc["p2p"].size(), 6u) << doc["p2p"].dump(2);
  for (const auto& run : doc["p2p"]) {
    if (run["provider"] == "tcp" && run["test"] == "write_lat") {
      ASSERT_EQ(run["results"].size(), 1u);
      EXPECT_EQ(run["results"][0]["rounds"], 3);
      EXPECT_DOUBLE_EQ(run["results"][0]["t_typical_us"].get<double>(), 6.5);
      EXPECT_NEAR(run["results"][0]["spread"].get<double>(), 6.6 / 6.4, 1e-9);
    }
    if (run["provider"] == "shm" && run["test"] == "write_bw") {
      // The 1 MiB sweep row and the three rounds beyond the cache, one row per size.
      ASSERT_EQ(run["results"].size(), 2u) << run.dump(2);
      EXPECT_EQ(run["results"][1]["bytes"], 64u << 20);
      EXPECT_DOUBLE_EQ(run["results"][1]["bw_avg_gb_s"].get<double>(), 9.0);
    }
  }
  const json schema = load_schema("bench.schema.json");
  const auto problems = validate_json(doc["summary"][0], schema["properties"]["summary"]["items"]);
  for (const auto& p : problems) ADD_FAILURE() << p;
}

TEST(BenchSummary, LeadsWithWriteLatencyAndBandwidthBeyondTheCache) {
  const json doc = sample(6.4);
  const json& shm = doc["summary"][0];
  EXPECT_DOUBLE_EQ(shm["write_latency_us"].get<double>(), 0.51);
  EXPECT_EQ(shm["bw_out_of_cache_bytes"], 64u << 20);
  EXPECT_DOUBLE_EQ(shm["bw_out_of_cache_gb_s"].get<double>(), 9.0);
  const std::string text = cli::format_summary(doc);
  const auto header = text.find("provider  write latency (typical)");
  ASSERT_NE(header, std::string::npos) << text;
  EXPECT_LT(header, text.find("write bandwidth > LLC (32 MiB)")) << text;
  const auto shm_row = text.find("\nshm ");
  ASSERT_NE(shm_row, std::string::npos) << text;
  const std::string row = text.substr(shm_row + 1, text.find('\n', shm_row + 1) - shm_row - 1);
  EXPECT_NE(row.find("0.51 us (2 B)"), std::string::npos) << row;
  EXPECT_NE(row.find("9.00 GB/s (64 MiB)"), std::string::npos) << row;
  // The flattering figures are not what a reader sees first.
  EXPECT_EQ(row.find("0.04"), std::string::npos) << row;
  EXPECT_EQ(row.find("117"), std::string::npos) << row;
  EXPECT_LT(row.find("us"), row.find("GB/s")) << row;
}

TEST(BenchSummary, MarksAFigureWhoseRoundsSpreadBeyondTheThreshold) {
  const std::string quiet = cli::format_summary(sample(6.4));
  EXPECT_EQ(quiet.find(" !"), std::string::npos) << quiet;
  EXPECT_EQ(quiet.find("rounds differ"), std::string::npos) << quiet;

  // One tcp round 1.5x the others: above kSpreadMark (1.2).
  const json noisy_doc = sample(9.9);
  EXPECT_GT(noisy_doc["summary"][1]["write_latency_spread"].get<double>(), cli::kSpreadMark);
  const std::string noisy = cli::format_summary(noisy_doc);
  const auto tcp_row = noisy.find("\ntcp ");
  ASSERT_NE(tcp_row, std::string::npos) << noisy;
  const std::string row = noisy.substr(tcp_row + 1, noisy.find('\n', tcp_row + 1) - tcp_row - 1);
  EXPECT_NE(row.find("6.60 us (2 B) !"), std::string::npos) << row;
  EXPECT_EQ(row.find("GB/s (64 MiB) !"), std::string::npos) << row;  // 1.62 / 1.5 stays below the threshold
  EXPECT_NE(noisy.find("! its rounds differ by more than 1.2x"), std::string::npos) << noisy;
  const auto shm_row = noisy.find("\nshm ");
  EXPECT_EQ(noisy.substr(shm_row + 1, noisy.find('\n', shm_row + 1) - shm_row - 1).find(" !"), std::string::npos);
}

TEST(BenchSummary, OutOfCacheSizeIsAPowerOfTwoBeyondTwiceTheCache) {
  EXPECT_EQ(cli::out_of_cache_bytes(32u << 20), 64u << 20);
  EXPECT_EQ(cli::out_of_cache_bytes(36u << 20), 128u << 20);
  EXPECT_GT(cli::last_level_cache_bytes(), 0u);
}

}  // namespace
}  // namespace rdmx::test
