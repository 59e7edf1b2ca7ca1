// SPDX-License-Identifier: MIT
// rdmx plan check (docs/ADVISOR.md, "Checking a claim"): the bandwidth a
// claimed throughput implies through the model, and the claims that cannot
// be: above the compute ceiling, or beyond what the stated links carry.
#include <gtest/gtest.h>

#include <string>

#include "plan/check.hpp"
#include "plan/fabric.hpp"
#include "plan/planner.hpp"
#include "plan/workload.hpp"
#include "run_cli.hpp"

namespace rdmx::test {
namespace {

using namespace rdmx::cli::plan;

PlanRequest resnet_on(int nodes) {
  PlanRequest rq;
  std::string source;
  const Description d = preset_description("resnet-50", &source);
  rq.workload.name = "resnet-50";
  rq.workload.samples_per_step = d.samples_per_step;
  rq.workload.step = describe_step(d);
  rq.nodes = {nodes};
  rq.gpus_per_node = 8;
  return rq;
}

double modelled(const PlanRequest& rq, const Fabric& f) {
  PlanRequest one = rq;
  one.fabrics = {f.name};
  return make_plan(one, {f}).rows.front().samples_per_s;
}

TEST(PlanCheck, AClaimIsReadBackAsTheBandwidthItImplies) {
  const PlanRequest rq = resnet_on(16);
  auto fabrics = load_fabrics("");
  Fabric tcp = find_fabric(fabrics, "tcp-25");
  const double line = tcp.nics_per_node * tcp.nic_gbit / 8;
  // Eight GPUs share its one NIC: the socket transport keeps only a share
  // of what the efficiency gives, and the implied bandwidth is what the
  // GPUs get.
  const double share = tcp.socket_share(8);
  EXPECT_LT(share, 0.6);
  // What the model gives at 40% of the line rate implies 40% of it, less
  // that share.
  Fabric at40 = tcp;
  at40.efficiency = 0.4;
  const auto fits = check_claims(rq, fabrics, {{"tcp-25", modelled(rq, at40)}});
  ASSERT_EQ(fits.size(), 1u);
  EXPECT_FALSE(fits[0].flagged) << fits[0].verdict;
  EXPECT_NEAR(fits[0].implied_net_gb_s, 0.4 * share * line, 0.4 * share * line * 0.01) << fits[0].verdict;
  EXPECT_NEAR(fits[0].line_gb_s, line, 1e-9);
  EXPECT_NE(fits[0].verdict.find("fits"), std::string::npos);

  // Twice the line rate's worth of throughput: not on these links.
  Fabric doubled = tcp;
  doubled.efficiency = 2.0 / share;
  const auto beyond = check_claims(rq, fabrics, {{"tcp-25", modelled(rq, doubled)}});
  EXPECT_TRUE(beyond[0].flagged);
  EXPECT_NEAR(beyond[0].implied_net_gb_s, 2 * line, 2 * line * 0.01);
  EXPECT_NE(beyond[0].verdict.find("more than the stated links carry"), std::string::npos) << beyond[0].verdict;

  // Above 128 GPUs at their one-GPU rate: not on this compute.
  const auto above = check_claims(rq, fabrics, {{"ib-ndr", 1e7}});
  EXPECT_TRUE(above[0].flagged);
  EXPECT_NEAR(above[0].ceiling, 128 * 256 / 0.1036, 1);
  EXPECT_NE(above[0].verdict.find("above the compute ceiling"), std::string::npos) << above[0].verdict;
  EXPECT_LT(above[0].implied_net_gb_s, 0);
}

// The answer says its margin and, per fabric, the node bandwidth it
// hinges on (docs/ADVISOR.md, "The decision"): a fabric given 1% more than
// that bandwidth keeps the target, 1% less does not.
TEST(PlanDecision, EachFabricSaysTheBandwidthItsAnswerHingesOn) {
  PlanRequest rq = resnet_on(2);
  rq.nodes = {2, 8};
  rq.fabrics = {"tcp-100", "roce-100", "ib-ndr"};
  rq.target_efficiency = 0.8;
  const auto fabrics = load_fabrics("");
  const Plan plan = make_plan(rq, fabrics);
  ASSERT_EQ(plan.hinges.size(), 3u);
  EXPECT_NE(plan.overall.why.find("points above the target"), std::string::npos) << plan.overall.why;
  for (const Hinge& h : plan.hinges) {
    EXPECT_EQ(h.nodes, 8);
    ASSERT_GT(h.needed_gb_s, 0) << hinge_text(plan, h);
    EXPECT_EQ(h.meets, h.needed_gb_s <= h.profiled_gb_s) << hinge_text(plan, h);
    // Scale the fabric (as planned, on the links compared) to just above and
    // just below the bandwidth it hinges on.
    const Fabric* planned = nullptr;
    for (const Fabric& f : plan.fabrics) planned = f.name == h.fabric ? &f : planned;
    ASSERT_NE(planned, nullptr);
    for (const double scale : {1.01, 0.99}) {
      Fabric f = *planned;
      f.gpudirect = true;
      f.efficiency = h.needed_gb_s * scale * 8 / (f.nics_per_node * f.nic_gbit * f.socket_share(8));
      const double e = modelled_efficiency(rq, f, 8, plan.node_loss.factor);
      EXPECT_EQ(e >= rq.target_efficiency, scale > 1) << h.fabric << " at " << scale << " x: " << e;
    }
  }
  const std::string text = plan_text(plan);
  EXPECT_NE(text.find("hinges on: tcp-100 (1x100G) keeps 80% at 8 nodes"), std::string::npos) << text;
}

TEST(PlanCheck, TheCommandTakesPlansOptionsAndRefusesABadClaim) {
  const CliResult r = run_cli({"plan", "check", "--model", "resnet-50", "--nodes", "16", "--claim", "ib-ndr=300000",
                               "--claim", "tcp-100=400000"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("# rdmx plan check: resnet-50 on 16 x 8 GPUs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("FLAG: above the compute ceiling"), std::string::npos) << r.out;
  const CliResult bad = run_cli({"plan", "check", "--nodes", "2", "--claim", "ib-ndr"});
  EXPECT_EQ(bad.exit_code, 2) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("expected FABRIC=SAMPLES_PER_S"), std::string::npos) << bad.err;
  const CliResult two = run_cli({"plan", "check", "--nodes", "2,4", "--claim", "ib-ndr=1000"});
  EXPECT_EQ(two.exit_code, 2) << two.out << two.err;
}

}  // namespace
}  // namespace rdmx::test
