// SPDX-License-Identifier: MIT
// rdmx perf p2p and perf coll: every test and collective on every provider,
// their JSON against the documented schemas, and argument errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>

#include "json_schema.hpp"
#include "rdmx/comm.hpp"
#include "report/svg_plot.hpp"
#include "run_cli.hpp"
#include "support/providers.hpp"

namespace rdmx::test {
namespace {

using nlohmann::json;
using rdmx::cli::format_bytes;

json parse_or_fail(const CliResult& r) {
  try {
    return json::parse(r.out);
  } catch (const json::parse_error& e) {
    ADD_FAILURE() << "no JSON document on stdout: " << e.what() << "\nstdout:\n" << r.out << "\nstderr:\n" << r.err;
    return json::object();
  }
}

class PerfOnProvider : public ::testing::TestWithParam<std::string> {};

TEST_P(PerfOnProvider, P2pRunsEveryTestAndMatchesItsSchema) {
  const CliResult r =
      run_cli({"perf", "p2p", "all", "--provider", GetParam(), "-s", "8,4K", "-n", "100", "--warmup", "10", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = parse_or_fail(r);
  expect_valid(doc, "perf_p2p.schema.json");
  EXPECT_EQ(doc["provider"], GetParam());
  EXPECT_EQ(doc["transport"], GetParam());
  std::set<std::string> tests;
  for (const auto& run : doc["runs"]) {
    tests.insert(run["test"]);
    ASSERT_FALSE(run["results"].empty()) << run["test"];
    for (const auto& row : run["results"]) {
      if (run["latency"].get<bool>()) {
        EXPECT_GT(row["t_typical_us"].get<double>(), 0) << run["test"];
        EXPECT_LE(row["t_min_us"].get<double>(), row["t_typical_us"].get<double>());
        EXPECT_LE(row["t_typical_us"].get<double>(), row["t_max_us"].get<double>());
      } else {
        EXPECT_GT(row["bw_avg_gb_s"].get<double>(), 0) << run["test"];
        EXPECT_GE(row["bw_peak_mib_s"].get<double>() * 1.0001, row["bw_avg_mib_s"].get<double>());
      }
    }
  }
  EXPECT_EQ(tests, (std::set<std::string>{"write_lat", "write_bw", "read_lat", "read_bw", "send_lat", "send_bw",
                                          "atomic_lat"}));
}

TEST_P(PerfOnProvider, P2pTableHasPerftestColumns) {
  const CliResult r = run_cli({"perf", "p2p", "write_lat,write_bw", "--provider", GetParam(), "-n", "100"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% "
                       "percentile[usec]   99.9% percentile[usec]"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("#bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("MB = 2^20 bytes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("half the round trip"), std::string::npos) << r.out;
}

// `perf coll -c 1` reports 0 wrong on every collective.
TEST_P(PerfOnProvider, CollCheckFindsNothingWrongInAnyCollective) {
  const CliResult r = run_cli({"perf", "coll", "all", "--provider", GetParam(), "--np", "3", "-b", "1K", "-e",
                               "64K",  "-f",   "8",   "-n",         "3",        "-w",   "1", "-c", "1",  "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = parse_or_fail(r);
  expect_valid(doc, "perf_coll.schema.json");
  std::set<std::string> seen;
  for (const auto& run : doc["runs"]) {
    seen.insert(run["collective"]);
    EXPECT_EQ(run["np"], 3);
    EXPECT_EQ(run["transport"], GetParam());
    EXPECT_EQ(run["wrong"], 0) << run["collective"];
    for (const auto& row : run["results"]) EXPECT_EQ(row["wrong"], 0) << run["collective"] << " " << row["bytes"];
  }
  EXPECT_EQ(seen.size(), 9u);
}

TEST_P(PerfOnProvider, CollTableHasNcclTestsColumnsAndFooter) {
  const CliResult r = run_cli({"perf", "coll", "all_reduce,broadcast", "--provider", GetParam(), "--np", "2", "-b", "8",
                               "-e", "4K", "-f", "8", "-n", "3", "-w", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("size         count      type   redop    root      time    algbw    busbw  #wrong"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# Avg bus bandwidth    :"), std::string::npos) << r.out;
}

// The banner says which transport ran, as perf coll's does: under auto, the
// provider chosen for the peer (two ranks on one host: shm).
TEST_P(PerfOnProvider, P2pBannerNamesTheTransport) {
  const CliResult r = run_cli({"perf", "p2p", "write_lat", "--provider", GetParam(), "-n", "100"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(" Transport       : " + GetParam() + "\n"), std::string::npos) << r.out;
  const CliResult a = run_cli({"perf", "p2p", "write_lat", "--provider", "auto", "-n", "100"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_NE(a.out.find(" Provider        : auto\n"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find(" Transport       : shm\n"), std::string::npos) << a.out;
}

// A timeout bounds silence, not a whole benchmark: a bandwidth run that lasts
// well beyond RDMX_TIMEOUT passes, on the passive side too (write_bw's rank 1
// waits for the closing WRITE_WITH_IMM; read_bw's only serves). Iterations are
// scaled from what a run achieved until one lasts at least 1.5 timeouts
// (aiming at 2.5), since a host's speed, and what else runs on it, are not
// known here. The timeout is 2 s, not less: on a 2-core host running the
// soft-RoCE guest beside this test, a rank can get no CPU for a second.
TEST_P(PerfOnProvider, BandwidthRunsLongerThanTheTimeoutPass) {
  constexpr double kBytes = 4.0 * (1 << 20);
  constexpr double kTimeoutSeconds = 2.0;
  for (const std::string test : {"write_bw", "read_bw"}) {
    long iters = 100;
    double seconds = 0;
    for (int attempt = 0; attempt < 4 && seconds < 1.5 * kTimeoutSeconds; ++attempt) {
      const CliResult r = run_cli({"perf", "p2p", test, "--provider", GetParam(), "-s", "4M", "-n",
                                   std::to_string(iters), "--warmup", "10", "--json"},
                                  {{"RDMX_TIMEOUT", "2s"}}, std::chrono::seconds(90));
      ASSERT_EQ(r.exit_code, 0) << test << " with RDMX_TIMEOUT=2s, " << iters << " iterations:\n" << r.err;
      const double gb_s = parse_or_fail(r)["runs"][0]["results"][0]["bw_avg_gb_s"].get<double>();
      seconds = static_cast<double>(iters) * kBytes / (gb_s * 1e9);
      iters = static_cast<long>(std::clamp(static_cast<double>(iters) * 2.5 * kTimeoutSeconds / seconds, 100.0, 5e7));
    }
    EXPECT_GT(seconds, 1.5 * kTimeoutSeconds)
        << test << ": no timed run outlasted RDMX_TIMEOUT=2s, so nothing was shown";
  }
}

// Concrete providers only: a run names the transport it used, which auto leaves open.
INSTANTIATE_TEST_SUITE_P(Providers, PerfOnProvider, ::testing::ValuesIn(tested_providers(false)),
                         [](const auto& param_info) { return param_info.param; });

TEST(PerfCommand, JsonLinesAreAppendedPerRow) {
  char dir_template[] = "/tmp/rdmx-perf-test.XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string path = std::string(dir_template) + "/rows.jsonl";
  const CliResult r = run_cli(
      {"perf", "coll", "all_reduce", "--np", "2", "--sizes", "8,1K", "-n", "2", "-w", "0", "--json-lines", path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(path);
  int rows = 0;
  for (std::string line; std::getline(in, line); ++rows) {
    const json row = json::parse(line);
    EXPECT_EQ(row["op"], "all_reduce");
    EXPECT_EQ(row["np"], 2);
  }
  EXPECT_EQ(rows, 4);  // 2 sizes x out of place, in place
  std::filesystem::remove_all(dir_template);
}

TEST(PerfCommand, ArgumentErrorsGiveUsage) {
  const std::vector<std::vector<std::string>> cases = {
      {"perf"},
      {"perf", "p2p"},
      {"perf", "p2p", "write_latt"},
      {"perf", "p2p", "write_lat", "-s", "12Q"},
      {"perf", "p2p", "write_bw", "-t", "0"},
      {"perf", "p2p", "write_lat", "-n", "1"},
      {"perf", "p2p", "write_lat", "--provider", "carrier-pigeon"},
      {"perf", "coll", "all_reduce", "--provider", "infiniband"},
      {"perf", "coll"},
      {"perf", "coll", "allreduce_perf"},
      {"perf", "coll", "all_reduce", "-d", "float128"},
      {"perf", "coll", "all_reduce", "-o", "xor"},
      {"perf", "coll", "all_reduce", "-d", "int32", "-o", "avg"},
      {"perf", "coll", "all_reduce", "-b", "1M", "-e", "1K"},
      {"perf", "coll", "all_reduce", "-c", "2"},
  };
  for (const auto& args : cases) {
    const CliResult r = run_cli(args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(r.exit_code, 2) << joined << "\n" << r.err;
    EXPECT_NE(r.err.find("Usage: rdmx perf"), std::string::npos) << joined << "\n" << r.err;
  }
}

// RDMX_PROVIDER=verbs (here through --provider) on a host without an RDMA
// device: every rank fails with the reason and what to do, and the job stops.
TEST(PerfCommand, VerbsWithoutADeviceFailsClearly) {
  if (std::filesystem::exists("/sys/class/infiniband") && !std::filesystem::is_empty("/sys/class/infiniband")) {
    GTEST_SKIP() << "this host has an RDMA device";
  }
  const CliResult r = run_cli({"perf", "p2p", "write_lat", "--provider", "verbs"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("no RDMA device"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("RDMX_PROVIDER=tcp"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("Segmentation"), std::string::npos) << r.err;
  // It reads as a sentence, and once: not per rank, not again in the launcher's report.
  EXPECT_EQ(r.err.find("rdmx not found"), std::string::npos) << r.err;
  EXPECT_EQ(occurrences(r.err, "no RDMA device"), 1u) << r.err;
  EXPECT_NE(r.err.find("] rdmx: no RDMA device: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rdmx perf p2p: rank "), std::string::npos) << r.err;
  // The same under rdmx run, whose ranks each run perf p2p as a launched rank.
  const CliResult run =
      run_cli({"run", "-n", "2", "--", cli_path(), "perf", "p2p", "write_lat"}, {{"RDMX_PROVIDER", "verbs"}});
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_EQ(occurrences(run.err, "no RDMA device"), 1u) << run.err;
  EXPECT_EQ(run.err.find("rdmx not found"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("rdmx run: rank "), std::string::npos) << run.err;
}

// 256 ranks of barrier once ran into the OOM killer: what the host's memory
// cannot hold is refused up front, with the numbers, before any rank starts.
TEST(PerfCommand, MoreRanksThanMemoryHoldsAreRefused) {
  const auto start = std::chrono::steady_clock::now();
  const CliResult r = run_cli({"perf", "coll", "barrier", "--np", "4096"}, {}, std::chrono::seconds(30));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("--np 4096: 4096 local ranks need about"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("available (MemAvailable in /proc/meminfo)"), std::string::npos) << r.err;
  // The library's estimate (rdmx::comm_memory), as Communicator::create checks it.
  const CommMemory m = comm_memory(4096, 4096);
  // perf coll runs all_to_all too, which connects every pair.
  EXPECT_NE(r.err.find("each rank maps " + format_bytes(static_cast<double>(m.per_peer)) +
                       " for each of the 4095 peers it connects to"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("RDMX_COLL_BUFFSIZE=4 MiB and its share of the shm rings), plus "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("hint: use fewer ranks"), std::string::npos) << r.err;
  // No rank started: nothing prefixed "[N]", and no launcher report.
  EXPECT_EQ(r.err.find("[0]"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("rdmx perf coll: rank"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_LT(took, std::chrono::seconds(5));
  // A smaller buffer size is part of the estimate.
  const CliResult small = run_cli({"perf", "coll", "barrier", "--np", "4096"}, {{"RDMX_COLL_BUFFSIZE", "64K"}});
  EXPECT_EQ(small.exit_code, 1) << small.err;
  EXPECT_NE(small.err.find("RDMX_COLL_BUFFSIZE=64 KiB and its share"), std::string::npos) << small.err;
}

// nccl-tests runs whole elements; a size that is not one is rounded down, and said so.
TEST(PerfCommand, ARoundedSizeIsNamed) {
  const CliResult r = run_cli({"perf", "coll", "all_reduce", "--np", "2", "-b", "7", "-e", "7", "-n", "3", "-w", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("rdmx perf coll: note: all_reduce of 7 B runs as 4 B: whole float elements (4 B each), so a "
                       "multiple of 4 B"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("\n           4             1     float"), std::string::npos) << r.out;
  const CliResult g =
      run_cli({"perf", "coll", "all_gather", "--np", "2", "--sizes", "100,96", "-n", "3", "-w", "1", "--json"});
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_NE(g.err.find("all_gather of 100 B runs as 96 B: whole float elements (4 B each), the same number per rank, "
                       "so a multiple of 8 B with 2 ranks"),
            std::string::npos)
      << g.err;
  EXPECT_EQ(occurrences(g.err, "note:"), 1u) << "96 B is exact: no note for it\n" << g.err;
  parse_or_fail(g);  // the note stays off stdout
}

TEST(PerfCommand, RootOutsideTheRanksIsAClearError) {
  const CliResult r = run_cli({"perf", "coll", "broadcast", "--np", "2", "-r", "5", "--sizes", "8"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("-r 5 is not a rank of 2"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace rdmx::test
