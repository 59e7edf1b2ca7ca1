// SPDX-License-Identifier: MIT
// rdmx plan against what the multi-host bed measured (docs/ADVISOR.md,
// "Validation"): the calibrated fabric profiles, all_reduce times and DDP
// steps of a bed run, kept in tests/tools/data/plan_validation by
// bench/plan/validation_data.py, replayed through the model. A change to the
// model that moves a prediction more than 15% from its measurement fails
// here; rows known to be further out carry their bound and why, and fail
// too when they come back within 15% (the explanation is then stale).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "plan/cost_model.hpp"
#include "plan/fabric.hpp"
#include "plan/planner.hpp"
#include "plan/workload.hpp"

namespace rdmx::test {
namespace {

using namespace rdmx::cli::plan;
using nlohmann::json;

const std::string kValidationData = std::string(RDMX_SOURCE_DIR) + "/tests/tools/data/plan_validation/";
constexpr double kTarget = 0.15;

json validation() {
  std::ifstream in(kValidationData + "validation.json");
  return json::parse(in);
}

Cluster layout_of(const std::string& layout) {
  const auto x = layout.find('x');
  return {std::stoi(layout.substr(0, x)), std::stoi(layout.substr(x + 1))};
}

// The allowed error of a row: 15%, or an explained row's own bound.
struct Allowance {
  double bound = kTarget;
  std::string why;
};

Allowance allowance(const json& doc, const json& row, const std::string& kind) {
  for (const auto& e : doc["explained"]) {
    if (e["kind"] != kind || e["rate"] != row["rate"] || e["layout"] != row["layout"]) continue;
    if (kind == "all_reduce" && e["bytes"] != row["bytes"]) continue;
    return {e["bound"].get<double>(), e["why"].get<std::string>()};
  }
  return {};
}

void check(const std::string& what, double predicted, double measured, const Allowance& a) {
  const double error = std::fabs(measured / predicted - 1);
  std::printf("%-40s predicted %10.1f measured %10.1f  measured/predicted %.3f%s\n", what.c_str(), predicted, measured,
              measured / predicted, a.why.empty() ? "" : "  (explained)");
  EXPECT_LE(error, a.bound) << what << ": predicted " << predicted << ", measured " << measured
                            << (a.why.empty() ? "" : "; explained as: " + a.why);
  if (!a.why.empty()) {
    EXPECT_GT(error, kTarget) << what << " is now within 15%: drop its explanation (" << a.why << ")";
  }
}

TEST(PlanValidation, AllReduceOnTheBedAsCalibrated) {
  const json doc = validation();
  ASSERT_GE(doc["collectives"].size(), 45u) << "three rates, five layouts, 1 MiB to 256 MiB";
  std::map<std::string, Fabric> fabrics;
  for (const auto& [rate, file] : doc["fabrics"].items()) {
    fabrics[rate] = load_fabrics(kValidationData + file.get<std::string>()).front();
  }
  int within = 0;
  for (const auto& row : doc["collectives"]) {
    const std::string rate = row["rate"], layout = row["layout"];
    ASSERT_TRUE(fabrics.count(rate)) << rate;
    const double bytes = row["bytes"].get<double>();
    const Estimate e = estimate(fabrics[rate], layout_of(layout), Collective::AllReduce, bytes, Library::Rdmx);
    const double measured = row["measured_us"].get<double>();
    const Allowance a = allowance(doc, row, "all_reduce");
    check(rate + " " + layout + " " + std::to_string(static_cast<long>(bytes)) + " B " + e.algo + " (us)",
          e.seconds * 1e6, measured, a);
    within += std::fabs(measured / (e.seconds * 1e6) - 1) <= kTarget;
  }
  std::printf("%d of %zu all_reduce predictions within 15%%\n", within, doc["collectives"].size());
}

// The profile captured at one rate, replayed with each rate's fabric. Its
// compute is scaled by the run's compute-only steps against the capture
// run's (rdmx plan --compute-ms): the advisor takes compute as given, and on
// the bed's two cores it moves by up to a third between runs.
TEST(PlanValidation, DdpStepsReplayedFromACapturedProfile) {
  const json doc = validation();
  ASSERT_GE(doc["ddp"].size(), 9u) << "three rates, three layouts";
  const auto capture_run = [&](const std::string& layout) {
    for (const auto& r : doc["ddp"]) {
      if (r["rate"] == doc["capture_rate"] && r["layout"] == layout) return r;
    }
    ADD_FAILURE() << "no run at the capture rate for " << layout;
    return json();
  };
  for (const auto& row : doc["ddp"]) {
    const std::string rate = row["rate"], layout = row["layout"];
    ASSERT_TRUE(doc["profiles"].contains(layout)) << layout;
    const json captured = capture_run(layout);
    ASSERT_FALSE(captured.is_null());
    PlanRequest rq;
    rq.workload = load_captured_profile(kValidationData + doc["profiles"][layout].get<std::string>());
    const double compute = replay(rq.workload.step, [](const StepCollective&) { return 0.0; }).compute_seconds;
    scale_compute(rq.workload.step,
                  compute * row["measured_compute_ms"].get<double>() / captured["measured_compute_ms"].get<double>());
    const Cluster c = layout_of(layout);
    rq.nodes = {c.nodes};
    rq.gpus_per_node = c.ranks_per_node;
    const auto known = load_fabrics(kValidationData + doc["fabrics"][rate].get<std::string>());
    rq.fabrics = {known.front().name};
    const Plan plan = make_plan(rq, known);
    ASSERT_EQ(plan.rows.size(), 1u);
    check("DDP " + row["model"].get<std::string>() + " " + rate + " " + layout + " step (ms)",
          plan.rows[0].timing.step_seconds * 1e3, row["measured_step_ms"].get<double>(), allowance(doc, row, "ddp"));
  }
}

}  // namespace
}  // namespace rdmx::test
