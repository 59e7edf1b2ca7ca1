// SPDX-License-Identifier: MIT
// rdmx plan's answer: a workload's step on each fabric and node count, its
// throughput, scaling efficiency and cost, and the cheapest fabric that
// meets a target efficiency.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/cost_model.hpp"
#include "plan/fabric.hpp"
#include "plan/workload.hpp"

namespace rdmx::cli::plan {

// Hourly prices: a node, and each fabric's share per node on top.
struct Prices {
  std::string currency = "USD";
  double node_per_hour = 0;
  std::map<std::string, double> fabric_per_node_per_hour;
  std::string source;
};
Prices load_prices(const std::string& path);

struct CollectiveRow {
  std::string op;
  double bytes = 0;
  std::string algo;
  std::string protocol;  // NCCL's; empty for rdmx or a measured time
  double seconds = 0;
};

struct PlanRow {
  std::string fabric;
  Cluster cluster;
  StepTiming timing;
  double samples_per_s = 0;
  double efficiency = 0;  // against one GPU with no communication
  std::optional<double> cost_per_hour;
  std::optional<double> cost_per_million_samples;
  std::vector<CollectiveRow> collectives;  // the step's distinct collectives, as costed
  double network_efficiency = 0;           // the model's, before the loss besides the network
  // The efficiency with the network as much slower and faster as the
  // published clusters on this transport were against the model
  // (validation.hpp, calibration_band).
  double efficiency_low = 0;
  double efficiency_high = 0;
};

// The loss besides the network (stragglers, input pipeline, the framework,
// the GPU's share taken by communication kernels): what one node of the
// job loses against its GPUs' one-GPU rate beyond what the model charges
// for communication inside the node, applied to every row.
struct NodeLoss {
  double measured = 1;  // one node's efficiency, given or the default
  double modelled = 1;  // the model's for one node (its communication inside the node)
  double factor = 1;    // measured / modelled, at most 1: what every row's throughput is multiplied by
  std::string source;
  bool is_default = false;
};

// Which links the fabrics are compared on. Equal (the default): every
// fabric on the first one's NICs, so only the transport differs; Given:
// every fabric on `nics` x `nic_gbit`; AsBuilt: each as its profile says.
struct Links {
  enum Mode { Equal, Given, AsBuilt } mode = Equal;
  int nics = 0;
  double nic_gbit = 0;
};
Links parse_links(const std::string& text);  // "equal", "as-built", "8x400" or "8x400G"
std::string to_string(const Links& links);

struct PlanRequest {
  Workload workload;
  std::vector<std::string> fabrics;
  std::vector<int> nodes;
  int gpus_per_node = 8;
  Library library = Library::Nccl;
  double target_efficiency = 0.9;
  std::optional<Prices> prices;
  Links links;
};

struct Recommendation {
  int nodes = 0;
  std::string fabric;  // empty: none meets the target
  std::string why;
};

// What a fabric's answer hinges on: the node network bandwidth (its NICs
// together, GB/s) at which it just keeps the target efficiency at the
// largest node count asked, against what its profile gives.
struct Hinge {
  std::string fabric;
  int nodes = 0;
  double needed_gb_s = -1;  // < 0: no bandwidth keeps the target (latency or compute binds)
  double profiled_gb_s = 0;
  bool meets = false;  // at the profile's bandwidth
};

struct Plan {
  PlanRequest request;
  std::vector<Fabric> fabrics;  // those asked for, in order, on the links compared
  std::vector<PlanRow> rows;    // fabric-major, node counts in order
  std::vector<Recommendation> per_node_count;
  Recommendation overall;  // nodes = 0: every node count asked
  NodeLoss node_loss;
  std::vector<Hinge> hinges;  // one per fabric, in order
  // What the reader must know to trust the answer: which library was
  // modelled and whether the other would change the recommendation, and
  // compute measured on GPUs other than those the fabrics describe.
  std::vector<std::string> notes;
};

// `value` printed by a printf format of one double ("%.1f%%").
std::string format_printf(const char* format, double value);

Plan make_plan(const PlanRequest& request, const std::vector<Fabric>& known);
// The scaling efficiency the plan's model gives `f` at `nodes`, its loss
// besides the network (`factor`) applied.
double modelled_efficiency(const PlanRequest& request, const Fabric& f, int nodes, double factor);
// The plan's hinges (hinges.cpp), and one as a sentence.
std::vector<Hinge> find_hinges(const Plan& plan);
std::string hinge_text(const Plan& plan, const Hinge& hinge);

nlohmann::json plan_to_json(const Plan& plan);
std::string plan_text(const Plan& plan);

}  // namespace rdmx::cli::plan
