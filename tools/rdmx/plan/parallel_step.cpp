// SPDX-License-Identifier: MIT
// The step of a job that splits its model (docs/ADVISOR.md, "Model
// parallelism"), as the planner replays it: tensor parallelism's
// all_reduces of activations inside a node, a pipeline's sends across
// stage boundaries and its bubble, expert parallelism's all_to_alls, and
// data parallelism over what is left; and where each group's collectives
// run on a layout.
#include <algorithm>
#include <string>

#include "plan/step_builder.hpp"
#include "plan/workload.hpp"
#include "rdmx/error.hpp"

namespace rdmx::cli::plan {
namespace {

[[noreturn]] void refuse(const std::string& what, const std::string& hint) {
  throw Error(ErrorCode::InvalidArgument, what, {.op = "rdmx plan", .hint = hint});
}

// Stages are laid out across nodes (nodes / stages each), or several to a
// node when there are more stages than nodes; a data-parallel group is one
// rank per tensor group in each stage's nodes. Valid once the layout fits.
struct DataLayout {
  int nodes = 0;     // nodes a data-parallel group spans
  int per_node = 0;  // its ranks on each
};
DataLayout data_layout(const Parallelism& p, const Cluster& cluster) {
  const int g = cluster.ranks_per_node, n = cluster.nodes;
  if (p.pipeline <= n) return {n / p.pipeline, g / p.tensor};
  return {n, g / (p.tensor * (p.pipeline / n))};
}

}  // namespace

StepTrace describe_parallel_step(const Description& d) {
  const Parallelism& p = d.parallel;
  if (p.tensor < 1 || p.pipeline < 1 || p.expert < 1 || p.micro_batches < 1) {
    refuse("parallel sizes and micro-batches must be at least 1", "--tensor-parallel 8 --pipeline-parallel 2 ...");
  }
  if (d.layers < 1 || d.hidden <= 0 || d.seq_len <= 0) {
    refuse(
        "tensor, pipeline and expert parallelism move activations: the model's --layers, --hidden and "
        "--seq-len are needed",
        "give them on the command line, or use a preset that has them (rdmx plan models)");
  }
  if (d.layers % p.pipeline != 0) {
    refuse(std::to_string(d.layers) + " layers do not split into " + std::to_string(p.pipeline) + " equal stages",
           "choose --pipeline-parallel dividing the layer count");
  }
  const std::string type = d.activation_bytes == 2 ? "bfloat16" : "float32";
  // A model replica spans tensor x pipeline ranks and takes their samples:
  // each GPU's compute per step is what it was with the whole model.
  const double replica_samples = d.samples_per_step * p.tensor * p.pipeline;
  const double micro = replica_samples / p.micro_batches;
  const double activation = micro * d.seq_len * d.hidden * d.activation_bytes;
  const int stage_layers = d.layers / p.pipeline;
  const int moe_layers = p.expert > 1 ? std::max(1, (d.moe_layers > 0 ? d.moe_layers : d.layers) / p.pipeline) : 0;

  StepBuilder b(d.activation_bytes == 2 ? "bfloat16" : "float32");
  // A collective every micro-batch waits for at once: nothing overlaps it.
  const auto exposed = [&b](Collective op, Group group, const char* what, double bytes, int repeat) {
    if (repeat > 0 && bytes > 0) b.wait(b.issue(op, bytes, group, repeat, std::string(to_string(op)) + what));
  };
  // Forward and backward of every micro-batch: two all_reduces per layer
  // each way (Megatron's attention and MLP), two all_to_alls per expert
  // layer each way (dispatch and combine of each token's top_k copies),
  // and on the pipeline's critical path one send per stage boundary and
  // slot each way.
  for (int pass = 0; pass < 2; ++pass) {
    if (p.tensor > 1) {
      exposed(Collective::AllReduce, Group::Tensor, " (tensor)", activation, 2 * stage_layers * p.micro_batches);
    }
    if (p.expert > 1) {
      exposed(Collective::AllToAll, Group::Expert, " (expert)", activation * d.top_k / p.tensor,
              2 * moe_layers * p.micro_batches);
    }
    if (p.pipeline > 1) {
      exposed(Collective::SendRecv, Group::Pipeline, " (pipeline)", activation / p.tensor,
              p.micro_batches + p.pipeline - 2);
    }
  }
  // 1F1B's bubble: (stages - 1) slots of a micro-batch's forward and
  // backward in which a stage waits for work.
  if (p.pipeline > 1) b.idle(d.compute_seconds * (p.pipeline - 1) / p.micro_batches);
  // Data parallelism over each rank's share of the parameters, as a job
  // without model parallelism would run it.
  Description rest = d;
  rest.parallel = Parallelism{};
  rest.parameters = d.parameters / (p.tensor * p.pipeline);
  b.append(describe_step(rest), Group::Data);
  StepTrace s = b.take();
  s.parallel = p;
  return s;
}

std::string parallel_misfit(const Parallelism& p, const Cluster& cluster) {
  const int g = cluster.ranks_per_node, n = cluster.nodes;
  const std::string layout = std::to_string(n) + " x " + std::to_string(g) + " GPUs";
  if (g % p.tensor != 0) {
    return "--tensor-parallel " + std::to_string(p.tensor) + " does not divide the " + std::to_string(g) +
           " GPUs of a node (" + layout + "); tensor parallelism stays inside a node";
  }
  const bool fits =
      p.pipeline <= n ? n % p.pipeline == 0 : p.pipeline % n == 0 && g % (p.tensor * (p.pipeline / n)) == 0;
  if (!fits) {
    return "--pipeline-parallel " + std::to_string(p.pipeline) + " with --tensor-parallel " + std::to_string(p.tensor) +
           " does not fit " + layout +
           "; stages are laid out over whole nodes (nodes a multiple of the stages) or whole shares of a node";
  }
  const DataLayout data_group = data_layout(p, cluster);
  const int data_per_node = data_group.per_node;
  const int data = data_group.nodes * data_per_node;
  if (data % p.expert != 0) {
    return "--expert-parallel " + std::to_string(p.expert) + " does not divide the " + std::to_string(data) +
           " data-parallel ranks of " + layout + "; expert groups are made of data-parallel ranks";
  }
  if (p.expert > data_per_node && p.expert % data_per_node != 0) {
    return "--expert-parallel " + std::to_string(p.expert) + " spans nodes but is not a multiple of the " +
           std::to_string(data_per_node) + " data-parallel ranks a node holds (" + layout + ")";
  }
  return "";
}

GroupPlacement place_group(const StepCollective& c, const StepTrace& step, const Cluster& cluster) {
  const Parallelism& p = step.parallel;
  const int g = cluster.ranks_per_node, n = cluster.nodes;
  if (c.group == Group::World) {
    // A captured subgroup keeps its size, packed onto as few nodes as hold it.
    if (c.group_ranks > 0 && step.captured_ranks > 0 && c.group_ranks < step.captured_ranks) {
      const int nodes = (c.group_ranks + g - 1) / g;
      return {{nodes, std::min(c.group_ranks, g)}, 1};
    }
    return {cluster, 1};
  }
  const std::string misfit = parallel_misfit(p, cluster);
  if (!misfit.empty())
    refuse(misfit, "choose parallel sizes that divide the layout (docs/ADVISOR.md, \"Model parallelism\")");
  if (c.group == Group::Tensor) return {{1, p.tensor}, 1};
  if (c.group == Group::Pipeline) return {{n > 1 ? 2 : 1, g}, 1};
  // Data and expert groups share each node's network with the node's
  // other groups, which run theirs at the same time.
  const DataLayout data = data_layout(p, cluster);
  const double share = static_cast<double>(data.per_node) / g;
  if (c.group == Group::Data) return {{data.nodes, data.per_node}, share};
  // An expert-parallel group: consecutive data-parallel ranks.
  if (p.expert <= data.per_node) return {{1, p.expert}, share};
  return {{p.expert / data.per_node, data.per_node}, share};
}

}  // namespace rdmx::cli::plan
