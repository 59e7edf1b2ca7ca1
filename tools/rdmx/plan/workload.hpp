// SPDX-License-Identifier: MIT
// A training step as rdmx plan replays it: the caller's compute, the
// collectives it issues and when it waits for them. A step comes from a
// description (parameters, DDP's gradient buckets, compute per step) or from
// a profile captured with RDMX_PROFILE; replaying it with a fabric's
// collective times gives the step time on that fabric.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/cost_model.hpp"

namespace rdmx::cli::plan {

// One action of the caller's timeline, in order.
struct StepAction {
  // Idle: the GPU waits for no collective and computes nothing (a
  // pipeline's bubble): step time that is neither compute nor network.
  enum Kind { Compute, Issue, Wait, Idle } kind = Compute;
  double seconds = 0;   // Compute, Idle: how long
  int collective = -1;  // Issue, Wait: index into StepTrace::collectives
};

// Which ranks a collective runs among (docs/ADVISOR.md, "Model
// parallelism"): all of them, a tensor-parallel group (inside a node), a
// data-parallel group (the ranks holding the same shard of the model), an
// expert-parallel group (consecutive data-parallel ranks), or the peers
// across a pipeline stage boundary.
enum class Group { World, Tensor, Data, Expert, Pipeline };

struct StepCollective {
  Collective op = Collective::AllReduce;
  double bytes = 0;  // as nccl-tests counts them (cost_model.hpp)
  std::string type = "float32";
  double measured_seconds = -1;  // captured: issue to completion, as measured; -1 described
  bool modelled = true;          // false: an operation the model does not cost (its measured time stands)
  std::string name;              // the operation as captured ("all_reduce", "barrier")
  Group group = Group::World;
  int group_ranks = 0;  // captured: its communicator's size when smaller than the job's (0: the job's)
  int repeat = 1;       // it stands for this many identical calls, each waited before the next
};

// How a described job splits its model over the ranks (1: not at all).
struct Parallelism {
  int tensor = 1;         // ranks of a tensor-parallel group, inside one node
  int pipeline = 1;       // pipeline stages
  int expert = 1;         // ranks of an expert-parallel group
  int micro_batches = 1;  // per step, through the pipeline
};

struct StepTrace {
  std::vector<StepCollective> collectives;
  std::vector<StepAction> actions;
  double measured_seconds = -1;  // captured: the step's measured length
  int captured_ranks = 0;        // captured: the ranks it ran on
  Parallelism parallel;
};

// What a step costs when collectives take `collective_seconds` each, issued
// in order on one queue (a communicator runs one at a time).
struct StepTiming {
  double step_seconds = 0;
  double compute_seconds = 0;  // the same step with free communication
  double comm_seconds = 0;     // all collectives' time together
  double exposed_seconds = 0;  // step - compute: what overlap did not hide
};
StepTiming replay(const StepTrace& step, const std::function<double(const StepCollective&)>& collective_seconds);

// Scales every compute gap of `step` so that they add up to `total_seconds`:
// the same job's timeline on a GPU that computes faster or slower.
void scale_compute(StepTrace& step, double total_seconds);

// A described job (issue 20's form b).
// How a data-parallel job shares its model state (docs/ADVISOR.md,
// "Sharded data parallelism"): DDP all_reduces gradients; ZeRO-1 too, then
// all_gathers the parameters its ranks updated in shards; ZeRO-2
// reduce_scatters gradients instead; ZeRO-3 (FSDP's full sharding)
// all_gathers each unit's parameters before its forward and its backward
// and reduce_scatters its gradients.
enum class Sharding { Ddp, Zero1, Zero2, Zero3 };
Sharding parse_sharding(const std::string& name);  // ddp, zero1, zero2, zero3 or fsdp
const char* to_string(Sharding sharding);

struct Description {
  double parameters = 0;
  double gradient_bytes = 4;               // per parameter: 4 fp32, 2 fp16/bf16
  double bucket_bytes = 25.0 * (1 << 20);  // DDP's bucket_cap_mb
  double first_bucket_bytes = 1 << 20;     // DDP's first bucket
  double compute_seconds = 0;              // per step per GPU, forward + backward + optimizer
  double forward_share = 1.0 / 3;          // of compute: backward costs about twice forward
  double optimizer_seconds = 0;            // after the last wait, inside compute_seconds
  Sharding sharding = Sharding::Ddp;       // buckets are FSDP's units under Zero3
  double samples_per_step = 1;             // per GPU (batch size)
  // Model parallelism (parallel_step.cpp): the layers, width and sequence
  // length give the activations tensor, pipeline and expert parallelism
  // move.
  Parallelism parallel;
  int layers = 0;
  double hidden = 0;
  double seq_len = 0;
  double activation_bytes = 2;  // bf16
  int moe_layers = 0;           // layers with experts (0 with expert parallelism: every layer)
  int top_k = 2;                // experts each token goes to
  std::string compute_gpu;      // the GPU compute_seconds holds for ("A100"); empty: the fabrics'
  // One node's throughput against its GPUs' one-GPU rate (0: not known),
  // and where that figure comes from.
  double one_node_efficiency = 0;
  std::string one_node_source;
};

// DDP's bucketed backward: buckets fill in reverse layer order as gradients
// appear (taken as even over the backward), each all_reduced when full, and
// every bucket waited for before the optimizer.
// The gradient buckets (FSDP's units when sharded): first_bucket_bytes,
// then bucket_bytes each, until the model's bytes are covered.
std::vector<double> bucket_sizes(const Description& d);
StepTrace describe_step(const Description& d);
// ZeRO-1, -2 and -3 (sharded_step.cpp).
StepTrace describe_sharded_step(const Description& d);
// Tensor, pipeline and expert parallelism, alone or together, with data
// parallelism (DDP or sharded) over what is left (parallel_step.cpp).
StepTrace describe_parallel_step(const Description& d);

// Where a collective of `step` runs when the job has `cluster`'s layout:
// the ranks and nodes of its group, and the share of each node's network
// it gets while the node's other groups run theirs at once. Throws when
// the parallelism does not fit the layout, naming both.
struct GroupPlacement {
  Cluster cluster;
  double net_share = 1;
};
GroupPlacement place_group(const StepCollective& c, const StepTrace& step, const Cluster& cluster);
// Why `p` does not fit `cluster`, or empty when it does.
std::string parallel_misfit(const Parallelism& p, const Cluster& cluster);

struct Workload {
  std::string name;    // "resnet-50", or the profile's file
  std::string origin;  // "preset", "described", "captured"
  std::string source;  // where its numbers come from
  double parameters = 0;
  double samples_per_step = 1;  // per GPU
  std::string compute_gpu;      // the GPU its compute was measured on; empty: the fabrics' own
  // Measured one-node scaling (throughput of a node against its GPUs at
  // their one-GPU rate) and its source; 0: none, the planner's default.
  double one_node_efficiency = 0;
  std::string one_node_source;
  StepTrace step;
};

// Presets: tools/rdmx/plan/data/models.json, compiled in, or a file of its form.
const std::string& builtin_models_text();
Description preset_description(const std::string& name, std::string* source, const std::string& models_file = "");
std::vector<std::string> preset_names(const std::string& models_file = "");

// A profile written under RDMX_PROFILE (docs/ADVISOR.md, "Profiles"): the
// median step after the first (a warm-up), or the only one.
Workload load_captured_profile(const std::string& path);

}  // namespace rdmx::cli::plan
