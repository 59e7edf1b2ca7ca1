// SPDX-License-Identifier: MIT
// What each fabric's answer hinges on (docs/ADVISOR.md, "The decision"):
// the node network bandwidth at which it just keeps the target at the
// largest node count asked, found by bisection on the bandwidth, the rest
// of its profile (latency, staging aside, the loss besides the network)
// as planned.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "plan/planner.hpp"

namespace rdmx::cli::plan {
namespace {

// `f` giving a node's `ranks_per_node` GPUs `gb_s` of network together,
// reached directly (GPUDirect: no staging cap, so the figure is the
// network's own).
Fabric with_bandwidth(const Fabric& f, int ranks_per_node, double gb_s) {
  Fabric t = f;
  t.gpudirect = true;
  t.efficiency = gb_s * 8 / (f.nics_per_node * f.nic_gbit * f.socket_share(ranks_per_node));
  return t;
}

}  // namespace

std::vector<Hinge> find_hinges(const Plan& plan) {
  std::vector<Hinge> out;
  if (plan.request.nodes.empty()) return out;
  const int nodes = *std::max_element(plan.request.nodes.begin(), plan.request.nodes.end());
  const double target = plan.request.target_efficiency;
  const double factor = plan.node_loss.factor;
  for (const Fabric& f : plan.fabrics) {
    Hinge h;
    h.fabric = f.name;
    h.nodes = nodes;
    h.profiled_gb_s = f.node_net_bytes_per_s(plan.request.gpus_per_node) / 1e9;
    for (const PlanRow& row : plan.rows) {
      if (row.fabric == f.name && row.cluster.nodes == nodes) h.meets = row.efficiency + 1e-9 >= target;
    }
    auto efficiency_at = [&](double gb_s) {
      return modelled_efficiency(plan.request, with_bandwidth(f, plan.request.gpus_per_node, gb_s), nodes, factor);
    };
    // From a trickle to 1000 times the profile's: if even that misses the
    // target, bandwidth is not what it hinges on.
    double lo = h.profiled_gb_s * 1e-4, hi = h.profiled_gb_s * 1e3;
    if (nodes > 1 && efficiency_at(hi) + 1e-9 >= target) {
      if (efficiency_at(lo) >= target) {
        h.needed_gb_s = lo;
      } else {
        for (int i = 0; i < 50; ++i) {
          const double mid = std::sqrt(lo * hi);
          (efficiency_at(mid) >= target ? hi : lo) = mid;
        }
        h.needed_gb_s = hi;
      }
    }
    out.push_back(h);
  }
  return out;
}

std::string hinge_text(const Plan& plan, const Hinge& h) {
  const Fabric* f = nullptr;
  for (const Fabric& candidate : plan.fabrics) {
    if (candidate.name == h.fabric) f = &candidate;
  }
  const std::string name = f != nullptr ? fabric_label(*f) : h.fabric;
  const std::string target = format_printf("%.0f%%", plan.request.target_efficiency * 100);
  const std::string at = " at " + std::to_string(h.nodes) + " node" + (h.nodes == 1 ? "" : "s");
  if (h.nodes <= 1) return name + ": one node, no network between nodes";
  if (h.needed_gb_s < 0) {
    return name + " cannot keep " + target + at +
           " at any network bandwidth: latency, the links inside a node or the loss besides the network bind first";
  }
  const std::string needed = format_printf("%.2f GB/s", h.needed_gb_s);
  const std::string profiled = format_printf("%.2f GB/s", h.profiled_gb_s);
  if (h.meets) {
    return name + " keeps " + target + at + " while a node's network reaches " + needed + "; its profile gives " +
           profiled + " (" + format_printf("%.1fx", h.profiled_gb_s / h.needed_gb_s) + " the need)";
  }
  const double line = f != nullptr ? f->nics_per_node * f->nic_gbit / 8 : 0;
  const std::string beyond = f != nullptr && h.needed_gb_s > line
                                 ? ", more than its links' line rate of " + format_printf("%.2f GB/s", line)
                                 : "";
  // What published socket runs reached on such links, for a socket fabric
  // asked for more than its profile gives.
  std::string published;
  if (f != nullptr && f->transport == "socket") {
    const double per_nic = static_cast<double>(plan.request.gpus_per_node) / std::max(1, f->nics_per_node);
    published = per_nic >= 8 ? " (published NCCL socket runs with 8 GPUs per NIC reach 0.42-0.70 of the line "
                               "rate: NVIDIA/nccl#209, #450)"
                             : " (published NCCL socket runs reach 0.96 of a 32 GbE link with one GPU per node: "
                               "NVIDIA/nccl#209; none is published with fewer than 8 GPUs per NIC at 100 GbE or "
                               "more)";
  }
  return name + " keeps " + target + at + " only if a node's network reaches " + needed + beyond +
         "; its profile gives " + profiled + published;
}

}  // namespace rdmx::cli::plan
