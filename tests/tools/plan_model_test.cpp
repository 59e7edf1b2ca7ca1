// SPDX-License-Identifier: MIT
// rdmx plan's model, in process: collective costs against the formulas of
// docs/ADVISOR.md, each library's choice, the replay of a step, captured
// profiles, fabric files, the recommendation and the page.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "plan/cost_model.hpp"
#include "plan/fabric.hpp"
#include "plan/planner.hpp"
#include "plan/report_page.hpp"
#include "plan/workload.hpp"
#include "rdmx/error.hpp"
#include "run_cli.hpp"

namespace rdmx::test {
namespace {

using namespace rdmx::cli::plan;

// Round numbers, so expected times can be worked out by hand.
Fabric simple_fabric() {
  Fabric f;
  f.name = "simple";
  f.latency_us = 10;
  f.nic_gbit = 8;  // 1 GB/s
  f.efficiency = 1;
  f.nics_per_node = 1;
  f.gpudirect = true;
  f.staging_gb_s = 100;
  f.intra_latency_us = 1;
  f.intra_gb_s = 10;
  f.reduce_gb_s = 4;
  return f;
}

double algo_time(const std::vector<Estimate>& all, const std::string& algo) {
  for (const auto& e : all) {
    if (e.algo == algo) return e.seconds;
  }
  ADD_FAILURE() << "no estimate for " << algo;
  return -1;
}

TEST(PlanCostModel, RingAllReduceIsTwoStepsPerRankAndTheBandwidthTerm) {
  const Fabric f = simple_fabric();
  const double n = 64e6, p = 4;
  // 4 nodes of one rank: 2(p-1) steps of 10 us, 2(p-1)/p n over 1 GB/s;
  // rdmx reduces (p-1)/p n at 4 GB/s while the network carries the next
  // chunk. NCCL's model is tests/tools/plan_nccl_model_test.cpp's.
  const double moved = 2 * (p - 1) * 10e-6 + 2 * (p - 1) / p * n / 1e9;
  const auto rdmx = estimate_algorithms(f, {4, 1}, Collective::AllReduce, n);
  EXPECT_NEAR(algo_time(rdmx, "ring"), moved, moved * 1e-9);
}

TEST(PlanCostModel, HierarchicalSendsTheLeastAnyAlgorithmMustOutOfEachNode) {
  const Fabric f = simple_fabric();
  const double n = 256e6;
  const auto all = estimate_algorithms(f, {4, 4}, Collective::AllReduce, n);
  // The bound: 2(H-1)/H x n through each node's 1 GB/s.
  const double bound = 2.0 * 3 / 4 * n / 1e9;
  EXPECT_GT(algo_time(all, "hier"), bound);
  // Above it by the steps inside the nodes and the reduction.
  EXPECT_LT(algo_time(all, "hier"), bound * 1.3);
  EXPECT_LT(algo_time(all, "hier"), algo_time(all, "ring"));
  // A flat ring over 16 ranks sends 2(p-1)/p n out of each node.
  EXPECT_GT(algo_time(all, "ring"), 2.0 * 15 / 16 * n / 1e9);
  EXPECT_EQ(estimate(f, {4, 4}, Collective::AllReduce, n, Library::Rdmx).algo, "hier");
}

TEST(PlanCostModel, EachLibraryPicksAsItsOwnTableOrModelDoes) {
  const Fabric f = simple_fabric();
  // rdmx: the lowest of its model. At 2 ranks recursive doubling (the
  // ring's bytes in half the steps); across more nodes rd while a step
  // costs more than its exchanges lose (0.65 of the link: rd and hd on the
  // bed), the ring beyond; never hd across nodes of one rank.
  EXPECT_EQ(estimate(f, {2, 1}, Collective::AllReduce, 16 * 1024, Library::Rdmx).algo, "rd");
  EXPECT_EQ(estimate(f, {2, 1}, Collective::AllReduce, 64 << 20, Library::Rdmx).algo, "rd");
  EXPECT_EQ(estimate(f, {8, 1}, Collective::AllReduce, 4096, Library::Rdmx).algo, "rd");
  EXPECT_EQ(estimate(f, {8, 1}, Collective::AllReduce, 1 << 20, Library::Rdmx).algo, "ring");
  EXPECT_EQ(estimate(f, {8, 1}, Collective::AllReduce, 64 << 20, Library::Rdmx).algo, "ring");
  // NCCL: the faster of ring and tree by the model, the tree for small sizes on many nodes.
  EXPECT_EQ(estimate(f, {64, 8}, Collective::AllReduce, 4096, Library::Nccl).algo, "tree");
  const Estimate big = estimate(f, {64, 8}, Collective::AllReduce, 1e9, Library::Nccl);
  EXPECT_LE(big.seconds, algo_time(estimate_algorithms(f, {64, 8}, Collective::AllReduce, 1e9, Library::Nccl), "ring"));
}

TEST(PlanCostModel, MoreNicsAndGpuDirectAreFasterAndOneRankCostsNothing) {
  Fabric f = simple_fabric();
  const double one = estimate(f, {4, 8}, Collective::AllReduce, 1e9, Library::Rdmx).seconds;
  f.nics_per_node = 8;
  const double eight = estimate(f, {4, 8}, Collective::AllReduce, 1e9, Library::Rdmx).seconds;
  EXPECT_LT(eight, one / 3);
  f.gpudirect = false;
  f.staging_gb_s = 2;  // slower than 8 NICs of 1 GB/s: staging sets the pace
  const double staged = estimate(f, {4, 8}, Collective::AllReduce, 1e9, Library::Rdmx).seconds;
  EXPECT_GT(staged, eight * 1.5);
  EXPECT_EQ(estimate(f, {1, 1}, Collective::AllReduce, 1e9, Library::Rdmx).seconds, 0);
  EXPECT_THROW(estimate(f, {0, 8}, Collective::AllReduce, 1e9, Library::Rdmx), Error);
}

TEST(PlanWorkload, DdpBucketsOverlapTheBackwardAndTheTailIsExposed) {
  Description d;
  d.parameters = 13.0 * (1 << 20) / 4 * 4;  // 52 MiB of fp32 gradients: buckets 1, 25, 25, 1 MiB
  d.gradient_bytes = 4;
  d.compute_seconds = 0.3;  // forward 0.1, backward 0.2
  const StepTrace step = describe_step(d);
  ASSERT_EQ(step.collectives.size(), 4u);
  EXPECT_DOUBLE_EQ(step.collectives[0].bytes, 1 << 20);
  EXPECT_DOUBLE_EQ(step.collectives[1].bytes, 25 << 20);
  EXPECT_DOUBLE_EQ(step.collectives[3].bytes, 1 << 20);
  // Free communication: the step is its compute.
  const StepTiming free = replay(step, [](const StepCollective&) { return 0.0; });
  EXPECT_NEAR(free.step_seconds, 0.3, 1e-12);
  EXPECT_NEAR(free.exposed_seconds, 0, 1e-12);
  // 1 s per MiB: the last bucket (issued at the end of the backward) starts
  // after the queue drains: 1 MiB issued at 0.1 + 0.2/52 finishes 1 s later,
  // then 25 + 25 + 1 s more; the step ends when the queue does.
  const StepTiming slow = replay(step, [](const StepCollective& c) { return c.bytes / (1 << 20); });
  const double first_issue = 0.1 + 0.2 * 1 / 52;
  EXPECT_NEAR(slow.step_seconds, first_issue + 52, 1e-9);
  EXPECT_NEAR(slow.comm_seconds, 52, 1e-9);
  EXPECT_NEAR(slow.exposed_seconds, slow.step_seconds - 0.3, 1e-9);
}

TEST(PlanWorkload, ACapturedProfileReplaysItsMedianStepWithItsOwnGaps) {
  // Three steps: a slow first (warm-up), then 10 ms steps in which an
  // all_reduce is issued at 2 ms, waited for at 6 ms and done at 8 ms, and a
  // barrier runs blocking at 9 ms for 0.5 ms.
  std::string text = R"({"rdmx_profile":1,"rank":0,"ranks":4,"samples_per_step":32,"parameters":1000})"
                     "\n";
  text += R"({"step":0,"duration_us":50000,"collectives":[]})"
          "\n";
  for (int s = 1; s <= 2; ++s) {
    text +=
        R"({"step":)" + std::to_string(s) +
        R"(,"duration_us":10000,"collectives":[{"op":"all_reduce","bytes":4194304,"type":"fp32","ranks":4,"issue_us":2000,"wait_us":6000,"done_us":8000},{"op":"barrier","bytes":0,"type":"uint8","ranks":4,"issue_us":9000,"wait_us":9000,"done_us":9500}]})"
        "\n";
  }
  const Workload w = load_captured_profile(write_temp_file("plan_profile.jsonl", text));
  EXPECT_EQ(w.step.captured_ranks, 4);
  EXPECT_DOUBLE_EQ(w.samples_per_step, 32);
  ASSERT_EQ(w.step.collectives.size(), 2u);
  EXPECT_TRUE(w.step.collectives[0].modelled);
  EXPECT_FALSE(w.step.collectives[1].modelled);  // barrier: its measured time stands
  // Replayed with the measured times it gives back the measured step.
  const StepTiming measured = replay(w.step, [](const StepCollective& c) { return c.measured_seconds; });
  EXPECT_NEAR(measured.step_seconds, 0.010, 1e-9);
  // Compute: 2 + 4 before the wait, 1 after it, 0.5 after the barrier = 9.5 - 2 (stall) ... by gaps:
  // 2 ms, 4 ms, then from 8 ms to 9 ms, then 9.5 to 10 ms: 7.5 ms.
  EXPECT_NEAR(measured.compute_seconds, 0.0075, 1e-9);
  // A collective free of cost leaves only the barrier's 0.5 ms.
  const StepTiming fast = replay(w.step, [](const StepCollective& c) { return c.modelled ? 0.0 : c.measured_seconds; });
  EXPECT_NEAR(fast.step_seconds, 0.008, 1e-9);
  // --compute-ms 15: every gap doubled, the collectives as they were. The
  // all_reduce (issued at 4 ms, 6 ms long) is done by the wait at 12 ms;
  // 2 ms, the 0.5 ms barrier and 1 ms follow.
  StepTrace scaled = w.step;
  scale_compute(scaled, 0.015);
  const StepTiming slower = replay(scaled, [](const StepCollective& c) { return c.measured_seconds; });
  EXPECT_NEAR(slower.compute_seconds, 0.015, 1e-9);
  EXPECT_NEAR(slower.step_seconds, 0.0155, 1e-9);
  // A plan of it names the barrier as kept at its measured time.
  PlanRequest rq;
  rq.workload = w;
  rq.fabrics = {"ib-ndr"};
  rq.nodes = {2};
  rq.gpus_per_node = 2;
  const Plan plan = make_plan(rq, load_fabrics(""));
  bool named = false;
  for (const auto& note : plan.notes) {
    named = named || (note.find("not re-costed for other fabrics") != std::string::npos &&
                      note.find("barrier (1)") != std::string::npos);
  }
  EXPECT_TRUE(named) << plan_text(plan);
}

TEST(PlanWorkload, AProfileWithoutWaitsCountsThemWhereTheLastCollectiveIsIssued) {
  // DDP waits on futures: the recorder sees no wait. Buckets at 1 and 5 ms,
  // each done 3 ms after; the step ends at 12 ms.
  std::string text = R"({"rdmx_profile":1,"rank":0,"ranks":2})"
                     "\n";
  text += R"({"step":0,"duration_us":12000,"collectives":[)"
          R"({"op":"all_reduce","bytes":1048576,"ranks":2,"issue_us":1000,"wait_us":null,"done_us":4000},)"
          R"({"op":"all_reduce","bytes":1048576,"ranks":2,"issue_us":5000,"done_us":8000}]})"
          "\n";
  const Workload w = load_captured_profile(write_temp_file("plan_profile_nowait.jsonl", text));
  const StepTiming t = replay(w.step, [](const StepCollective& c) { return c.measured_seconds; });
  // The caller computes until 5 ms, waits for both (until 8 ms), then computes 4 ms more.
  EXPECT_NEAR(t.compute_seconds, 0.009, 1e-9);
  EXPECT_NEAR(t.step_seconds, 0.012, 1e-9);
}

TEST(PlanWorkload, OnceStepsAreMarkedOnlyMarkedStepsCount) {
  // bench/torch/ddp_step.py --profile-steps: found steps of barriers and
  // unsynchronised work (5 ms, many of them), then a mark closing all that
  // (100 ms), then marked 20 ms steps. Without the rule the median would be
  // a 5 ms scaffolding step.
  std::string text = R"({"rdmx_profile":1,"rank":0,"ranks":2})"
                     "\n";
  const std::string barrier =
      R"("collectives":[{"op":"barrier","bytes":0,"ranks":2,"issue_us":0,"wait_us":0,"done_us":100}]})";
  for (int s = 0; s < 6; ++s) {
    text += R"({"step":)" + std::to_string(s) + R"(,"duration_us":5000,"marked":false,)" + barrier + "\n";
  }
  text += R"({"step":6,"duration_us":100000,"marked":true,)" + barrier + "\n";
  for (int s = 7; s < 10; ++s) {
    text += R"({"step":)" + std::to_string(s) +
            R"(,"duration_us":20000,"marked":true,"collectives":[{"op":"all_reduce","bytes":1048576,"ranks":2,)"
            R"("issue_us":15000,"done_us":18000}]})"
            "\n";
  }
  text += R"({"step":10,"duration_us":3000,"marked":true,"partial":true,)" + barrier + "\n";
  const Workload w = load_captured_profile(write_temp_file("plan_profile_marked.jsonl", text));
  ASSERT_EQ(w.step.collectives.size(), 1u);
  EXPECT_EQ(w.step.collectives[0].name, "all_reduce");
  EXPECT_NEAR(w.step.measured_seconds, 0.020, 1e-9);
  EXPECT_NE(w.source.find("median of 3 step(s) of 4"), std::string::npos) << w.source;
}

TEST(PlanWorkload, ABrokenProfileIsRefusedWithItsFileAndLine) {
  try {
    load_captured_profile(
        write_temp_file("plan_bad.jsonl", "{\"rdmx_profile\":1,\"ranks\":2}\n{\"step\":0,\"duration_us\":\n"));
    FAIL() << "a truncated line was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("plan_bad.jsonl: line 2"), std::string::npos) << e.what();
  }
  try {
    load_captured_profile(
        write_temp_file("plan_noheader.jsonl", "{\"step\":0,\"duration_us\":5,\"collectives\":[]}\n"));
    FAIL() << "a profile without its header was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no header"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_captured_profile("/nonexistent/profile.jsonl"), Error);
}

TEST(PlanFabrics, TheBuiltInFileParsesAndEveryValueHasASource) {
  const auto fabrics = load_fabrics("");
  EXPECT_GE(fabrics.size(), 6u);
  for (const char* name : {"ib-ndr", "ib-hdr", "roce-400", "roce-200", "roce-100", "tcp-100", "tcp-25"}) {
    const Fabric& f = find_fabric(fabrics, name);
    for (const char* field : {"latency_us", "nic_gbit", "efficiency", "nics_per_node", "intra_gb_s", "reduce_gb_s"}) {
      EXPECT_TRUE(f.sources.count(field)) << name << " has no source for " << field;
    }
  }
  EXPECT_THROW(find_fabric(fabrics, "carrier-pigeon"), Error);
}

TEST(PlanFabrics, ABadFieldIsNamedWithItsFabricAndFile) {
  nlohmann::json doc = nlohmann::json::parse(builtin_fabrics_text());
  doc["fabrics"]["ib-ndr"]["efficiency"] = 1.7;
  try {
    parse_fabrics(doc, "mine.json");
    FAIL() << "an efficiency above 1 was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("mine.json: fabric ib-ndr: field 'efficiency'"), std::string::npos) << what;
  }
  doc["fabrics"]["ib-ndr"].erase("efficiency");
  EXPECT_THROW(parse_fabrics(doc, "mine.json"), Error);
}

PlanRequest resnet_request() {
  PlanRequest rq;
  std::string source;
  const Description d = preset_description("resnet-50", &source);
  rq.workload.name = "resnet-50 <b>";
  rq.workload.origin = "preset";
  rq.workload.source = source;
  rq.workload.samples_per_step = d.samples_per_step;
  rq.workload.step = describe_step(d);
  rq.fabrics = {"ib-ndr", "tcp-25"};
  rq.nodes = {2, 16};
  rq.gpus_per_node = 8;
  rq.links.mode = Links::AsBuilt;  // the fabrics as profiled, 8x400G against 1x25G
  // The network alone: no loss besides it (docs/ADVISOR.md).
  rq.workload.one_node_efficiency = 1;
  rq.workload.one_node_source = "none: the network alone";
  return rq;
}

TEST(PlanPlanner, TheCheapestFabricThatKeepsTheTargetIsRecommended) {
  PlanRequest rq = resnet_request();
  rq.target_efficiency = 0.6;
  const Plan easy = make_plan(rq, load_fabrics(""));
  ASSERT_EQ(easy.rows.size(), 4u);
  for (const auto& row : easy.rows) {
    EXPECT_GT(row.efficiency, 0);
    EXPECT_LE(row.efficiency, 1.0 + 1e-12);
    EXPECT_NEAR(row.samples_per_s, 8.0 * row.cluster.nodes * 256 / row.timing.step_seconds, 1e-6);
  }
  // As NCCL runs the all_reduces, tcp-25 (8 GPUs on one NIC: half its
  // socket rate) keeps 60% at 2 nodes but not at 16; ib-ndr keeps it
  // everywhere.
  EXPECT_EQ(easy.per_node_count[0].fabric, "tcp-25");
  EXPECT_EQ(easy.per_node_count[1].fabric, "ib-ndr");
  EXPECT_EQ(easy.overall.fabric, "ib-ndr");
  rq.target_efficiency = 1.0;
  const Plan impossible = make_plan(rq, load_fabrics(""));
  EXPECT_TRUE(impossible.overall.fabric.empty());
  EXPECT_NE(impossible.overall.why.find("no fabric"), std::string::npos);
}

TEST(PlanPlanner, PricesGiveCostsAndAMissingPriceIsRefused) {
  PlanRequest rq = resnet_request();
  Prices prices;
  prices.node_per_hour = 30;
  prices.fabric_per_node_per_hour = {{"ib-ndr", 6}, {"tcp-25", 1}};
  rq.prices = prices;
  const Plan p = make_plan(rq, load_fabrics(""));
  ASSERT_TRUE(p.rows[0].cost_per_hour.has_value());
  EXPECT_DOUBLE_EQ(*p.rows[0].cost_per_hour, 2 * (30 + 6));
  EXPECT_NEAR(*p.rows[0].cost_per_million_samples, 72.0 / 3600 / p.rows[0].samples_per_s * 1e6, 1e-9);
  rq.prices->fabric_per_node_per_hour.erase("tcp-25");
  EXPECT_THROW(make_plan(rq, load_fabrics("")), Error);
}

TEST(PlanReport, ThePageIsSelfContainedWithBothPlotsAndEveryRow) {
  const Plan p = make_plan(resnet_request(), load_fabrics(""));
  std::string html = render_plan_html(plan_to_json(p));
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("url("), std::string::npos);
  // The SVG namespace is a name, never fetched; no other address may appear.
  const std::string xmlns = "xmlns=\"http://www.w3.org/2000/svg\"";
  std::string no_namespace = html;
  for (auto at = no_namespace.find(xmlns); at != std::string::npos; at = no_namespace.find(xmlns)) {
    no_namespace.erase(at, xmlns.size());
  }
  EXPECT_EQ(no_namespace.find("http://"), std::string::npos);
  EXPECT_EQ(no_namespace.find("https://"), std::string::npos);
  std::size_t svgs = 0;
  for (auto at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1)) ++svgs;
  EXPECT_EQ(svgs, 2u);
  EXPECT_NE(html.find("resnet-50 &lt;b&gt;"), std::string::npos);
  EXPECT_EQ(html.find("resnet-50 <b>"), std::string::npos);
  EXPECT_NE(html.find("Recommended: ib-ndr"), std::string::npos);
  std::size_t rows = 0;
  for (auto at = html.find("<tr><td class=\"num\">"); at != std::string::npos;
       at = html.find("<tr><td class=\"num\">", at + 1)) {
    ++rows;
  }
  EXPECT_EQ(rows, p.rows.size());
}

}  // namespace
}  // namespace rdmx::test

namespace rdmx::test {
namespace {

using namespace rdmx::cli::plan;

double bytes_of(const StepTrace& s, Collective op) {
  double sum = 0;
  for (const auto& c : s.collectives) sum += c.op == op ? c.bytes : 0;
  return sum;
}

// ZeRO-1/2/3 (docs/ADVISOR.md, "Sharded data parallelism"): what each moves
// per step and where it waits, against DDP's one all_reduce of the model.
TEST(PlanWorkload, ShardedStepsMoveWhatEachStageMoves) {
  Description d;
  d.parameters = 100e6;
  d.gradient_bytes = 2;
  d.compute_seconds = 0.3;
  d.optimizer_seconds = 0.01;
  const double w = 200e6;
  auto step = [&](Sharding s) {
    Description x = d;
    x.sharding = s;
    return describe_step(x);
  };
  const StepTrace ddp = step(Sharding::Ddp), z1 = step(Sharding::Zero1), z2 = step(Sharding::Zero2),
                  z3 = step(Sharding::Zero3);
  EXPECT_NEAR(bytes_of(ddp, Collective::AllReduce), w, 1);
  EXPECT_NEAR(bytes_of(z1, Collective::AllReduce), w, 1);
  EXPECT_NEAR(bytes_of(z1, Collective::AllGather), w, 1);
  EXPECT_NEAR(bytes_of(z2, Collective::ReduceScatter), w, 1);
  EXPECT_NEAR(bytes_of(z2, Collective::AllGather), w, 1);
  EXPECT_EQ(bytes_of(z2, Collective::AllReduce), 0);
  EXPECT_NEAR(bytes_of(z3, Collective::AllGather), 2 * w, 1) << "gathered for the forward and again for the backward";
  EXPECT_NEAR(bytes_of(z3, Collective::ReduceScatter), w, 1);
  // ZeRO-3 gathers before any forward compute; ZeRO-1/2 gather after the optimizer.
  EXPECT_EQ(z3.actions.front().kind, StepAction::Issue);
  EXPECT_EQ(z3.collectives[static_cast<std::size_t>(z3.actions.front().collective)].op, Collective::AllGather);
  EXPECT_EQ(z2.actions.back().kind, StepAction::Wait);
  EXPECT_EQ(z2.collectives[static_cast<std::size_t>(z2.actions.back().collective)].op, Collective::AllGather);
  // Free communication leaves the compute, whatever the stage.
  for (const StepTrace* s : {&ddp, &z1, &z2, &z3}) {
    const StepTiming t = replay(*s, [](const StepCollective&) { return 0.0; });
    EXPECT_NEAR(t.step_seconds, 0.3, 1e-9);
    EXPECT_NEAR(t.compute_seconds, 0.3, 1e-9);
  }
  // With equal per-byte costs, ZeRO-1 exposes more than DDP (its gather
  // follows the optimizer), and ZeRO-3 issues three times DDP's bytes.
  auto slow = [](const StepCollective& c) { return c.bytes / 1e9; };
  EXPECT_GT(replay(z1, slow).step_seconds, replay(ddp, slow).step_seconds);
  EXPECT_EQ(parse_sharding("fsdp"), Sharding::Zero3);
  EXPECT_THROW(parse_sharding("zero4"), Error);
}

}  // namespace
}  // namespace rdmx::test
