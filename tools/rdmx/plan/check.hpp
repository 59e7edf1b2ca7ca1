// SPDX-License-Identifier: MIT
// rdmx plan check: the advisor run backwards. Given the throughput someone
// claims (or measured) for a job on a fabric, what network bandwidth the
// claim implies through the model, and whether it is possible at all: above
// the compute ceiling (every GPU at its one-GPU rate, communication free),
// or needing more bandwidth than the stated links carry.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/planner.hpp"

namespace rdmx::cli::plan {

struct Claim {
  std::string fabric;
  double samples_per_s = 0;
};

struct ClaimCheck {
  Claim claim;
  double ceiling = 0;    // samples/s with free communication
  double predicted = 0;  // samples/s the fabric's profile gives
  // The node network bandwidth (GB/s, the NICs together) at which the
  // model gives the claimed throughput; < 0 when no bandwidth does (the
  // claim is at or above what free bandwidth gives).
  double implied_net_gb_s = -1;
  double line_gb_s = 0;  // the stated links: NICs x line rate
  bool flagged = false;
  std::string verdict;
};

// Each claim against `request`'s workload on request.nodes.front() nodes of
// request.gpus_per_node GPUs, through request.library's model.
std::vector<ClaimCheck> check_claims(const PlanRequest& request, const std::vector<Fabric>& known,
                                     const std::vector<Claim>& claims);
nlohmann::json checks_to_json(const PlanRequest& request, const std::vector<ClaimCheck>& checks);
std::string checks_text(const PlanRequest& request, const std::vector<ClaimCheck>& checks);

}  // namespace rdmx::cli::plan
