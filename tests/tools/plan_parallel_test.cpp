// SPDX-License-Identifier: MIT
// Model parallelism in rdmx plan (docs/ADVISOR.md, "Model parallelism"):
// the collectives tensor, pipeline and expert parallelism add to a step,
// where each group's collectives run on a layout, the pipeline's bubble,
// all_to_all and send/recv costed from the links, and a captured profile's
// all_to_all and sends re-costed for every fabric.
#include <gtest/gtest.h>

#include <string>

#include "plan/cost_model.hpp"
#include "plan/fabric.hpp"
#include "plan/planner.hpp"
#include "plan/workload.hpp"
#include "rdmx/error.hpp"
#include "run_cli.hpp"

namespace rdmx::test {
namespace {

using namespace rdmx::cli::plan;

// Round numbers: 1 GB/s of network per node, 10 GB/s inside it.
Fabric round_fabric() {
  Fabric f;
  f.name = "round";
  f.latency_us = 10;
  f.nic_gbit = 8;
  f.efficiency = 1;
  f.nics_per_node = 1;
  f.gpudirect = true;
  f.intra_latency_us = 1;
  f.intra_gb_s = 10;
  f.reduce_gb_s = 100;
  f.gpu = "H100";
  return f;
}

Description transformer() {
  Description d;
  d.parameters = 1e9;
  d.gradient_bytes = 2;
  d.compute_seconds = 1.0;
  d.samples_per_step = 2;
  d.layers = 8;
  d.hidden = 1024;
  d.seq_len = 1024;
  return d;
}

const StepCollective* find(const StepTrace& s, Group group) {
  for (const auto& c : s.collectives) {
    if (c.group == group) return &c;
  }
  return nullptr;
}

TEST(PlanParallel, TensorParallelismAllReducesActivationsInsideTheNode) {
  Description d = transformer();
  d.parallel.tensor = 4;
  const StepTrace s = describe_step(d);
  const StepCollective* tp = find(s, Group::Tensor);
  ASSERT_NE(tp, nullptr);
  // A replica spans 4 GPUs and takes their 8 samples: 8 x 1024 tokens x
  // 1024 wide x 2 bytes, twice per layer each way.
  EXPECT_DOUBLE_EQ(tp->bytes, 8.0 * 1024 * 1024 * 2);
  EXPECT_EQ(tp->op, Collective::AllReduce);
  int calls = 0;
  for (const auto& c : s.collectives) calls += c.group == Group::Tensor ? c.repeat : 0;
  EXPECT_EQ(calls, 2 * 2 * 8);
  const GroupPlacement at = place_group(*tp, s, {4, 8});
  EXPECT_EQ(at.cluster.nodes, 1);
  EXPECT_EQ(at.cluster.ranks_per_node, 4);
  // Data parallelism over a quarter of the parameters each, 2 of the
  // node's 8 GPUs per group: a quarter of the node's network each.
  const StepCollective* dp = find(s, Group::Data);
  ASSERT_NE(dp, nullptr);
  double dp_bytes = 0;
  for (const auto& c : s.collectives) dp_bytes += c.group == Group::Data ? c.bytes : 0;
  EXPECT_NEAR(dp_bytes, 1e9 / 4 * 2, 1);
  const GroupPlacement data = place_group(*dp, s, {4, 8});
  EXPECT_EQ(data.cluster.nodes, 4);
  EXPECT_EQ(data.cluster.ranks_per_node, 2);
  EXPECT_DOUBLE_EQ(data.net_share, 0.25);
  // The tensor group's all_reduces cost the same on any network.
  Fabric slow = round_fabric();
  slow.efficiency = 0.1;
  const double fast_tp = estimate(round_fabric(), {1, 4}, Collective::AllReduce, tp->bytes, Library::Nccl).seconds;
  const double slow_tp = estimate(slow, {1, 4}, Collective::AllReduce, tp->bytes, Library::Nccl).seconds;
  EXPECT_DOUBLE_EQ(fast_tp, slow_tp);
}

TEST(PlanParallel, APipelineSendsAcrossStagesAndWaitsInItsBubble) {
  Description d = transformer();
  d.parallel.pipeline = 2;
  d.parallel.micro_batches = 4;
  const StepTrace s = describe_step(d);
  double idle = 0;
  for (const auto& a : s.actions) idle += a.kind == StepAction::Idle ? a.seconds : 0;
  EXPECT_DOUBLE_EQ(idle, 1.0 * (2 - 1) / 4);  // (stages - 1) / micro-batches of the compute
  int sends = 0;
  for (const auto& c : s.collectives) sends += c.group == Group::Pipeline ? c.repeat : 0;
  EXPECT_EQ(sends, 2 * (4 + 2 - 2));
  const StepCollective* p2p = find(s, Group::Pipeline);
  ASSERT_NE(p2p, nullptr);
  EXPECT_EQ(p2p->op, Collective::SendRecv);
  // Each micro-batch: 4 samples (2 GPUs' 2 each, in 4 micro-batches) of 1024 x 1024 x 2 bytes.
  EXPECT_DOUBLE_EQ(p2p->bytes, 1.0 * 1024 * 1024 * 2);
  // Across nodes every GPU of a node sends at once: 8 share 1 GB/s.
  const GroupPlacement at = place_group(*p2p, s, {2, 8});
  EXPECT_EQ(at.cluster.nodes, 2);
  const Estimate e = estimate(round_fabric(), at.cluster, p2p->op, p2p->bytes, Library::Nccl);
  EXPECT_NEAR(e.seconds, 10e-6 + p2p->bytes * 8 / 1e9, 1e-9);
  // The bubble is time, not compute: the step's compute stays 1 s.
  const StepTiming t = replay(s, [](const StepCollective&) { return 0.0; });
  EXPECT_NEAR(t.compute_seconds, 1.0, 1e-9);
  EXPECT_NEAR(t.step_seconds, 1.25, 1e-9);
}

TEST(PlanParallel, ExpertParallelismAllToAllsAcrossTheGroupsNodes) {
  Description d = transformer();
  d.parallel.expert = 16;
  d.top_k = 2;
  const StepTrace s = describe_step(d);
  const StepCollective* ep = find(s, Group::Expert);
  ASSERT_NE(ep, nullptr);
  EXPECT_EQ(ep->op, Collective::AllToAll);
  EXPECT_DOUBLE_EQ(ep->bytes, 2.0 * 1024 * 1024 * 2 * 2);  // top_k copies of each token
  int calls = 0;
  for (const auto& c : s.collectives) calls += c.group == Group::Expert ? c.repeat : 0;
  EXPECT_EQ(calls, 2 * 2 * 8);  // every layer: dispatch and combine, each way
  const GroupPlacement at = place_group(*ep, s, {4, 8});
  EXPECT_EQ(at.cluster.nodes, 2);
  EXPECT_EQ(at.cluster.ranks_per_node, 8);
  // all_to_all from the links: each rank sends 1/16 of its buffer to each
  // peer; 8 ranks x 8 peers on the other node through 1 GB/s.
  const double bytes = ep->bytes;
  const Estimate e = estimate(round_fabric(), at.cluster, Collective::AllToAll, bytes, Library::Nccl);
  EXPECT_NEAR(e.seconds, 10e-6 + 8 * 8 * bytes / 16 / 1e9, 1e-9);
  EXPECT_EQ(e.algo, "p2p");
}

TEST(PlanParallel, ParallelismThatDoesNotFitTheLayoutIsRefusedByName) {
  Description d = transformer();
  d.parallel.tensor = 3;
  const StepTrace s = describe_step(d);
  EXPECT_NE(parallel_misfit(s.parallel, {2, 8}).find("--tensor-parallel 3 does not divide the 8 GPUs"),
            std::string::npos);
  d.parallel = {2, 3, 1, 4};
  EXPECT_NE(parallel_misfit(d.parallel, {4, 8}).find("--pipeline-parallel 3"), std::string::npos);
  d.parallel = {1, 1, 24, 1};
  EXPECT_NE(parallel_misfit(d.parallel, {4, 8}).find("--expert-parallel 24 does not divide the 32"), std::string::npos);
  d.parallel = {1, 1, 12, 1};
  EXPECT_NE(parallel_misfit(d.parallel, {6, 8}).find("--expert-parallel 12 spans nodes"), std::string::npos);
  EXPECT_EQ(parallel_misfit(d.parallel, {6, 4}), "") << "12 ranks: three whole nodes of 4";
  Description shapeless = transformer();
  shapeless.layers = 0;
  shapeless.parallel.tensor = 2;
  EXPECT_THROW(describe_step(shapeless), Error);

  const CliResult r = run_cli({"plan", "--model", "gpt2-medium", "--nodes", "3", "--pipeline-parallel", "2"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--pipeline-parallel 2 with --tensor-parallel 1 does not fit 3 x 8 GPUs"), std::string::npos)
      << r.err;
  const CliResult no_shape = run_cli({"plan", "--model", "resnet-50", "--nodes", "2", "--tensor-parallel", "2"});
  EXPECT_NE(no_shape.err.find("--layers, --hidden and --seq-len are needed"), std::string::npos) << no_shape.err;
}

TEST(PlanParallel, TheCommandPlansAllThreeTogetherAndTheNetworkMovesOnlyWhatCrossesIt) {
  const CliResult r =
      run_cli({"plan", "--model", "gpt2-medium", "--nodes", "2,4", "--tensor-parallel", "4", "--pipeline-parallel", "2",
               "--micro-batches", "8", "--expert-parallel", "2", "--fabrics", "ib-ndr,tcp-100", "--links", "as-built"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("tensor x pipeline x expert parallel 4 x 2 x 2, 8 micro-batches"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("note: loss besides the network"), std::string::npos) << r.out;
}

TEST(PlanParallel, ACapturedProfilesAllToAllAndSendsAreRecostedForEachFabric) {
  // One step on 16 ranks: an all_to_all on the whole job, a send to the
  // next stage, and an all_reduce on an 8-rank subgroup (a tensor group).
  std::string text = R"({"rdmx_profile":1,"rank":0,"ranks":16,"samples_per_step":4})"
                     "\n";
  text += R"({"step":0,"duration_us":100000,"collectives":[)"
          R"({"op":"all_to_all","bytes":67108864,"ranks":16,"issue_us":1000,"wait_us":1000,"done_us":5000},)"
          R"({"op":"send","bytes":16777216,"ranks":16,"issue_us":10000,"wait_us":10000,"done_us":12000},)"
          R"({"op":"all_reduce","bytes":16777216,"ranks":8,"issue_us":20000,"wait_us":20000,"done_us":21000}]})"
          "\n";
  const Workload w = load_captured_profile(write_temp_file("plan_profile_parallel.jsonl", text));
  ASSERT_EQ(w.step.collectives.size(), 3u);
  for (const auto& c : w.step.collectives) EXPECT_TRUE(c.modelled) << c.name;
  EXPECT_EQ(w.step.collectives[0].op, Collective::AllToAll);
  EXPECT_EQ(w.step.collectives[1].op, Collective::SendRecv);
  // The subgroup keeps its 8 ranks at every layout: one node of 8.
  const GroupPlacement sub = place_group(w.step.collectives[2], w.step, {4, 8});
  EXPECT_EQ(sub.cluster.nodes, 1);
  EXPECT_EQ(sub.cluster.ranks_per_node, 8);
  const GroupPlacement world = place_group(w.step.collectives[0], w.step, {4, 8});
  EXPECT_EQ(world.cluster.nodes, 4);
  PlanRequest rq;
  rq.workload = w;
  rq.fabrics = {"ib-ndr", "tcp-100"};
  rq.links.mode = Links::AsBuilt;
  rq.nodes = {2};
  rq.gpus_per_node = 8;
  const Plan plan = make_plan(rq, load_fabrics(""));
  ASSERT_EQ(plan.rows.size(), 2u);
  // The all_to_all and the send cost more on one 100G TCP NIC than on
  // eight 400G InfiniBand ones; nothing is left at its measured time.
  double ib = 0, tcp = 0;
  for (const auto& c : plan.rows[0].collectives) ib += c.op == "all_to_all" || c.op == "send" ? c.seconds : 0;
  for (const auto& c : plan.rows[1].collectives) tcp += c.op == "all_to_all" || c.op == "send" ? c.seconds : 0;
  EXPECT_GT(tcp, 5 * ib);
  for (const auto& note : plan.notes) EXPECT_EQ(note.find("not re-costed"), std::string::npos) << note;
}

}  // namespace
}  // namespace rdmx::test
