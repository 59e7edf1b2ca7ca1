// SPDX-License-Identifier: MIT
#include "plan/check.hpp"

#include <cmath>
#include <cstdio>

#include "rdmx/error.hpp"

namespace rdmx::cli::plan {
namespace {

// The workload planned on one fabric and node count.
Plan plan_on(const PlanRequest& rq, const Fabric& f, int nodes) {
  PlanRequest one = rq;
  one.fabrics = {f.name};
  one.nodes = {nodes};
  one.prices.reset();
  return make_plan(one, {f});
}

}  // namespace

std::vector<ClaimCheck> check_claims(const PlanRequest& rq, const std::vector<Fabric>& known,
                                     const std::vector<Claim>& claims) {
  if (rq.nodes.empty()) {
    throw Error(ErrorCode::InvalidArgument, "rdmx plan check needs a node count", {.op = "rdmx plan check"});
  }
  const int nodes = rq.nodes.front();
  std::vector<ClaimCheck> out;
  for (const Claim& claim : claims) {
    if (!(claim.samples_per_s > 0)) {
      throw Error(ErrorCode::InvalidArgument,
                  "the claim for " + claim.fabric + " must be a positive throughput (samples/s)",
                  {.op = "rdmx plan check", .hint = "--claim ib-ndr=250000"});
    }
    const Fabric& f = find_fabric(known, claim.fabric);
    ClaimCheck c;
    c.claim = claim;
    const Plan plan = plan_on(rq, f, nodes);
    const PlanRow& row = plan.rows.front();
    c.predicted = row.samples_per_s;
    // Free communication: the step is its compute alone.
    c.ceiling = row.timing.compute_seconds > 0
                    ? row.cluster.ranks() * rq.workload.samples_per_step / row.timing.compute_seconds
                    : 0;
    c.line_gb_s = f.nics_per_node * f.nic_gbit / 8;
    if (claim.samples_per_s > c.ceiling * (1 + 1e-9)) {
      c.flagged = true;
      c.verdict = "above the compute ceiling of " + format_printf("%.1f", c.ceiling) +
                  " samples/s (every GPU at its one-GPU rate, communication free): not possible on this compute";
      out.push_back(c);
      continue;
    }
    // The efficiency at which the model meets the claim: throughput rises
    // with it, so bisect (in log space) between a trickle and 100 x line rate.
    // Throughput is the scaling efficiency times the ceiling; the loss
    // besides the network does not depend on the links, so the plan's
    // factor holds for every trial, and no trial needs a whole plan.
    Fabric t = f;
    t.gpudirect = true;
    auto at = [&](double e) {
      t.efficiency = e;
      return modelled_efficiency(rq, t, nodes, plan.node_loss.factor) * c.ceiling;
    };
    double lo = 1e-5, hi = 100;
    if (at(hi) < claim.samples_per_s) {
      c.flagged = true;
      c.verdict = "more than even 100 x the stated links give through the model (" + format_printf("%.1f", at(hi)) +
                  " samples/s): the latency or the GPUs inside a node would have to be faster than the profile says";
      out.push_back(c);
      continue;
    }
    if (at(lo) >= claim.samples_per_s) {
      c.implied_net_gb_s = 0;
    } else {
      for (int i = 0; i < 60; ++i) {
        const double mid = std::sqrt(lo * hi);
        (at(mid) < claim.samples_per_s ? lo : hi) = mid;
      }
      // What the node's GPUs get together: a socket transport keeps only
      // its share of the links when GPUs share a NIC.
      c.implied_net_gb_s = c.line_gb_s * hi * f.socket_share(rq.gpus_per_node);
    }
    if (c.implied_net_gb_s > c.line_gb_s) {
      c.flagged = true;
      c.verdict = "implies " + format_printf("%.1f", c.implied_net_gb_s) +
                  " GB/s per node, more than the stated links carry (" + std::to_string(f.nics_per_node) + " x " +
                  format_printf("%g", f.nic_gbit) + " Gbit/s = " + format_printf("%.1f", c.line_gb_s) + " GB/s)";
    } else {
      c.verdict = "fits: implies " + format_printf("%.1f", c.implied_net_gb_s) + " GB/s per node, " +
                  format_printf("%.0f%%", c.implied_net_gb_s / c.line_gb_s * 100) +
                  " of the stated links (the profile assumes " +
                  format_printf("%.0f%%", f.efficiency * f.socket_share(rq.gpus_per_node) * 100) + ")";
    }
    out.push_back(c);
  }
  return out;
}

nlohmann::json checks_to_json(const PlanRequest& rq, const std::vector<ClaimCheck>& checks) {
  nlohmann::json j;
  j["rdmx_plan_check"] = 1;
  j["model"] = rq.workload.name;
  j["nodes"] = rq.nodes.front();
  j["gpus_per_node"] = rq.gpus_per_node;
  j["library"] = to_string(rq.library);
  j["claims"] = nlohmann::json::array();
  for (const auto& c : checks) {
    j["claims"].push_back(
        {{"fabric", c.claim.fabric},
         {"claimed_samples_per_s", c.claim.samples_per_s},
         {"ceiling_samples_per_s", c.ceiling},
         {"predicted_samples_per_s", c.predicted},
         {"implied_net_gb_s", c.implied_net_gb_s < 0 ? nlohmann::json(nullptr) : nlohmann::json(c.implied_net_gb_s)},
         {"line_gb_s", c.line_gb_s},
         {"flagged", c.flagged},
         {"verdict", c.verdict}});
  }
  return j;
}

std::string checks_text(const PlanRequest& rq, const std::vector<ClaimCheck>& checks) {
  std::string out = "# rdmx plan check: " + rq.workload.name + " on " + std::to_string(rq.nodes.front()) + " x " +
                    std::to_string(rq.gpus_per_node) + " GPUs, collectives as " + to_string(rq.library) +
                    " runs them\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-12s %14s %14s %14s\n", "fabric", "claimed", "predicted", "ceiling");
  out += line;
  for (const auto& c : checks) {
    std::snprintf(line, sizeof line, "%-12s %14.1f %14.1f %14.1f\n", c.claim.fabric.c_str(), c.claim.samples_per_s,
                  c.predicted, c.ceiling);
    out += line;
    out += std::string("  ") + (c.flagged ? "FLAG: " : "") + c.verdict + "\n";
  }
  return out;
}

}  // namespace rdmx::cli::plan
