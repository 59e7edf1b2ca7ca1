// SPDX-License-Identifier: MIT
// rdmx plan calibrate --from-nccl-tests (docs/ADVISOR.md, "Calibration"):
// nccl-tests output in the forms its versions and launchers print, read
// back; a profile fitted to a curve recovers the fabric that made it; the
// command writes a profile that predicts the curve it was fitted to.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "plan/cost_model.hpp"
#include "plan/fabric.hpp"
#include "plan/nccl_tests_log.hpp"
#include "rdmx/error.hpp"
#include "run_cli.hpp"

namespace rdmx::test {
namespace {

using namespace rdmx::cli::plan;

// nccl-tests 2.13 and later: Group and root columns, #wrong.
const char* const kModern =
    R"(# nThread 1 nGpus 1 minBytes 1048576 maxBytes 4194304 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid   1001 on     node-a device  0 [0x1b] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   1002 on     node-a device  1 [0x2b] NVIDIA H100 80GB HBM3
#  Rank  2 Group  0 Pid   2001 on     node-b device  0 [0x1b] NVIDIA H100 80GB HBM3
#  Rank  3 Group  0 Pid   2002 on     node-b device  1 [0x2b] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1   100.00   10.49   15.73      0    99.00   10.59   15.89      0
     2097152        524288     float     sum      -1   180.00   11.65   17.48      0   181.00   11.59   17.38      0
     4194304       1048576     float     sum      -1   340.00   12.34   18.50    N/A   339.00   12.37   18.56    N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 17.24
)";

// Older versions: no Group, no root, an "error" column; mpirun
// --tag-output's prefix on every line; a size printed by two ranks.
const char* const kOldTagged =
    R"([1,0]<stdout>:# nThread 1 nGpus 1 minBytes 8 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
[1,0]<stdout>:#   Rank  0 Pid   1320 on host-1 device  0 [0x00] Tesla V100-SXM2-16GB
[1,1]<stdout>:#   Rank  1 Pid   2066 on host-2 device  0 [0x00] Tesla V100-SXM2-16GB
[1,0]<stdout>:#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error
[1,0]<stdout>:      524288        131072     float     sum    400.0    1.31    1.31  0e+00    401.0    1.31    1.31  0e+00
[1,0]<stdout>:     1048576        262144     float     sum    700.0    1.50    1.50  0e+00    702.0    1.49    1.49  0e+00
[1,1]<stdout>:     1048576        262144     float     sum    900.0    1.17    1.17  0e+00    902.0    1.16    1.16  0e+00
[1,1]<stdout>:     1048576        262144     float     sum    800.0    1.31    1.31  0e+00    802.0    1.31    1.31  0e+00
)";

TEST(PlanCalibrateLog, TheFormsNcclTestsPrintsAreReadBack) {
  const NcclTestsLog modern = parse_nccl_tests_log(std::string("all_reduce_perf\n") + kModern, "modern.log");
  EXPECT_EQ(modern.collective, "all_reduce");
  EXPECT_EQ(modern.ranks, 4);
  EXPECT_EQ(modern.nodes, 2);
  EXPECT_EQ(modern.gpu, "NVIDIA H100 80GB HBM3");
  ASSERT_EQ(modern.points.size(), 3u);
  EXPECT_DOUBLE_EQ(modern.points[0].bytes, 1048576);
  EXPECT_DOUBLE_EQ(modern.points[0].seconds, 100e-6) << "the out-of-place time";
  EXPECT_DOUBLE_EQ(modern.points[2].busbw_gb_s, 18.50);

  const NcclTestsLog old = parse_nccl_tests_log(kOldTagged, "old.log");
  EXPECT_EQ(old.collective, "");
  EXPECT_EQ(old.ranks, 2);
  EXPECT_EQ(old.nodes, 2);
  EXPECT_EQ(old.gpu, "Tesla V100-SXM2-16GB");
  ASSERT_EQ(old.points.size(), 2u);
  EXPECT_DOUBLE_EQ(old.points[1].seconds, 800e-6) << "the median of the size's three lines";

  try {
    parse_nccl_tests_log("# nothing measured here\nhello world\n", "empty.log");
    ADD_FAILURE() << "a log without measurements was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("empty.log: no nccl-tests measurement"), std::string::npos) << e.what();
  }
}

// nccl-tests lines for `f`'s all_reduce on `c`, as the model predicts them.
std::string synthetic_log(const Fabric& f, const Cluster& c) {
  std::string out = "# all_reduce_perf\n";
  for (int r = 0; r < c.ranks(); ++r) {
    char line[160];
    std::snprintf(line, sizeof line, "#  Rank %2d Group  0 Pid %6d on %10s device %2d [0x1b] NVIDIA H100 80GB HBM3\n",
                  r, 100 + r, ("node-" + std::to_string(r / c.ranks_per_node)).c_str(), r % c.ranks_per_node);
    out += line;
  }
  const double p = c.ranks();
  for (double bytes = 1 << 16; bytes <= (1 << 30); bytes *= 4) {
    const double t = estimate(f, c, Collective::AllReduce, bytes, Library::Nccl).seconds;
    const double algbw = bytes / t / 1e9;
    char line[200];
    std::snprintf(line, sizeof line,
                  "%12.0f %12.0f     float     sum      -1 %9.2f %7.2f %7.2f      0 %9.2f %7.2f %7.2f      0\n", bytes,
                  bytes / 4, t * 1e6, algbw, algbw * 2 * (p - 1) / p, t * 1e6, algbw, algbw * 2 * (p - 1) / p);
    out += line;
  }
  return out;
}

// A curve made by a known fabric is fitted back to that fabric's
// efficiency and latency, from a profile that starts elsewhere.
TEST(PlanCalibrateLog, AFitRecoversTheFabricThatMadeTheCurve) {
  const auto fabrics = load_fabrics("");
  Fabric truth = find_fabric(fabrics, "tcp-100");
  truth.efficiency = 0.35;
  truth.latency_us = 60;
  const Cluster c{2, 8};
  const NcclTestsLog log = parse_nccl_tests_log(synthetic_log(truth, c), "synthetic");
  const CurveFit fit = fit_curve(find_fabric(fabrics, "tcp-100"), c, Collective::AllReduce, log.points, Library::Nccl);
  EXPECT_NEAR(fit.fabric.efficiency, 0.35, 0.35 * 0.02);
  EXPECT_NEAR(fit.fabric.latency_us, 60, 60 * 0.1);
  EXPECT_LT(fit.rms_error, 0.01);
}

TEST(PlanCalibrateLog, TheCommandWritesAProfileThatPredictsItsCurve) {
  const std::string dir = ::testing::TempDir() + "rdmx_calibrate_log_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  Fabric truth = find_fabric(load_fabrics(""), "roce-100");
  truth.efficiency = 0.7;
  truth.latency_us = 12;
  {
    std::ofstream log(dir + "/run.log");
    log << synthetic_log(truth, {4, 8});
  }
  const CliResult r = run_cli({"plan", "calibrate", "--from-nccl-tests", dir + "/run.log", "--like", "roce-100",
                               "--name", "measured-roce", "--out", dir + "/fitted.json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("all_reduce on 4 x 8 ranks"), std::string::npos) << r.out;
  const auto fitted = load_fabrics(dir + "/fitted.json");
  ASSERT_EQ(fitted.size(), 1u);
  EXPECT_EQ(fitted[0].name, "measured-roce");
  EXPECT_EQ(fitted[0].gpu, "H100");
  EXPECT_NE(fitted[0].sources.at("efficiency").find("fitted to"), std::string::npos);
  const double want = estimate(truth, {4, 8}, Collective::AllReduce, 1 << 30, Library::Nccl).seconds;
  const double got = estimate(fitted[0], {4, 8}, Collective::AllReduce, 1 << 30, Library::Nccl).seconds;
  EXPECT_NEAR(got / want, 1.0, 0.03);

  const CliResult missing = run_cli({"plan", "calibrate", "--from-nccl-tests", dir + "/absent.log"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("absent.log"), std::string::npos) << missing.err;
  std::filesystem::remove_all(dir);
}

// rdmx perf coll --json's document, as the command reads it: the
// out-of-place rows of the collective asked for, the in-place ones and
// other collectives left out; the layout comes from the options, since the
// document names no hosts.
TEST(PlanCalibrateLog, RdmxPerfCollJsonIsReadAsACurve) {
  Fabric truth = find_fabric(load_fabrics(""), "ib-hdr");
  truth.efficiency = 0.6;
  truth.latency_us = 20;
  nlohmann::json doc = {{"schema", "rdmx.perf.coll/1"}, {"np", 4}, {"runs", nlohmann::json::array()}};
  for (const char* name : {"all_gather", "all_reduce"}) {
    nlohmann::json run = {{"collective", name}, {"np", 4}, {"results", nlohmann::json::array()}};
    for (double bytes = 1 << 20; bytes <= (1 << 28); bytes *= 4) {
      const double s = estimate(truth, {2, 2}, Collective::AllReduce, bytes, Library::Rdmx).seconds;
      const double us = std::string(name) == "all_reduce" ? s * 1e6 : 1.0;
      run["results"].push_back({{"bytes", bytes}, {"inplace", false}, {"time_us", us}, {"busbw_GBps", 0}});
      run["results"].push_back({{"bytes", bytes}, {"inplace", true}, {"time_us", us * 3}, {"busbw_GBps", 0}});
    }
    doc["runs"].push_back(run);
  }
  const NcclTestsLog log = parse_perf_coll_json(doc.dump(), "perf.json", "all_reduce");
  EXPECT_EQ(log.collective, "all_reduce");
  EXPECT_EQ(log.ranks, 4);
  EXPECT_EQ(log.nodes, 0);
  ASSERT_EQ(log.points.size(), 5u);
  EXPECT_THROW(parse_perf_coll_json(doc.dump(), "perf.json", ""), Error);  // two collectives: which?
  EXPECT_THROW(parse_perf_coll_json(R"({"schema":"other"})", "perf.json", ""), Error);

  const std::string dir = ::testing::TempDir() + "rdmx_calibrate_perf_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/perf.json") << doc.dump(1);
  const CliResult r =
      run_cli({"plan", "calibrate", "--from-nccl-tests", dir + "/perf.json", "--op", "all_reduce", "--nodes", "2",
               "--gpus-per-node", "2", "--like", "ib-hdr", "--library", "rdmx", "--out", dir + "/fitted.json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto fitted = load_fabrics(dir + "/fitted.json");
  ASSERT_EQ(fitted.size(), 1u);
  EXPECT_NEAR(fitted[0].efficiency, 0.6, 0.03) << r.out;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace rdmx::test
