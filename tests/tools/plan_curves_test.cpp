// SPDX-License-Identifier: MIT
// The library of published nccl-tests curves (tools/rdmx/plan/data/curves,
// docs/ADVISOR.md "Published curves") replayed through the fit: each curve
// still fits within its rms bound, and the fitted efficiency and latency
// stay within tolerance of what the index records, so a change to the
// model that moves a real cluster's fit fails here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "plan/cost_model.hpp"
#include "plan/fabric.hpp"
#include "plan/nccl_tests_log.hpp"

namespace rdmx::test {
namespace {

using namespace rdmx::cli::plan;
using nlohmann::json;

const std::string kCurves = std::string(RDMX_SOURCE_DIR) + "/tools/rdmx/plan/data/curves/";

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(PlanCurves, EveryPublishedCurveStillFitsAsRecorded) {
  std::ifstream in(kCurves + "index.json");
  ASSERT_TRUE(in) << kCurves << "index.json";
  const json index = json::parse(in);
  ASSERT_GE(index["curves"].size(), 2u);
  const auto fabrics = load_fabrics("");
  for (const auto& c : index["curves"]) {
    const std::string file = c["file"];
    SCOPED_TRACE(file);
    for (const char* field : {"source", "cluster", "assumed", "why"}) {
      EXPECT_FALSE(c.value(field, std::string()).empty()) << "each curve says its " << field;
    }
    const NcclTestsLog log = parse_nccl_tests_log(slurp(kCurves + file), file);
    Collective op = Collective::AllReduce;
    ASSERT_TRUE(parse_collective(c["op"].get<std::string>(), &op));
    const Cluster layout{c["nodes"].get<int>(), c["gpus_per_node"].get<int>()};
    if (log.ranks > 0) {
      EXPECT_EQ(log.ranks, layout.ranks()) << "the log's ranks and the index's layout";
    }
    Fabric like = find_fabric(fabrics, c["like"].get<std::string>());
    like.nics_per_node = c["nics"].get<int>();
    like.nic_gbit = c["nic_gbit"].get<double>();
    like.transport = c["transport"].get<std::string>();
    like.gpu = c["gpu"].get<std::string>();
    const CurveFit fit = fit_curve(like, layout, op, log.points, Library::Nccl);
    const json& want = c["fitted"];
    const double tolerance = c["tolerance"].get<double>();
    std::printf("%-30s efficiency %.3f (recorded %.3f), latency %.1f us (%.1f), rms error %.1f%% (bound %.0f%%)\n",
                file.c_str(), fit.fabric.efficiency, want["efficiency"].get<double>(), fit.fabric.latency_us,
                want["latency_us"].get<double>(), fit.rms_error * 100, c["max_rms_error"].get<double>() * 100);
    EXPECT_LE(fit.rms_error, c["max_rms_error"].get<double>());
    EXPECT_NEAR(fit.fabric.efficiency, want["efficiency"].get<double>(), tolerance * want["efficiency"].get<double>());
    EXPECT_NEAR(fit.fabric.latency_us, want["latency_us"].get<double>(), tolerance * want["latency_us"].get<double>());
  }
}

}  // namespace
}  // namespace rdmx::test
