// SPDX-License-Identifier: MIT
// The alpha-beta-gamma cost of each collective algorithm: a step's latency,
// a byte's transfer inside a host or across a host's shared link, a byte's
// reduction. docs/COLLECTIVES.md ("Choosing an algorithm") gives every
// formula; the registry (algo_registry.cpp) names each algorithm's cost.
#pragma once

#include <string>

#include "coll/op_desc.hpp"
#include "rdmx/cost_model.hpp"

namespace rdmx::coll {

// The figures a communicator's model charges, the same on every rank.
struct LinkModel {
  LinkCost in_host{.latency_us = 9.7, .bandwidth_gbps = 20};
  LinkCost between_hosts{.latency_us = 34.5, .bandwidth_gbps = 1.25};
  double reduce_gbps = 5;
  double staging_bytes = 4 << 20;  // RDMX_COLL_BUFFSIZE
  std::string basis = "declared";  // where the figures come from, for explain()
};

// The library's own work per step of a schedule (posting, completion,
// waking the waiter), added to a provider's one-way latency to give what a
// step waits for.
inline constexpr double kStepOverheadUs = 9.5;
// Figures from providers' capabilities (DeviceCaps::latency_us,
// bandwidth_gbps) of the links inside hosts and between them; a kind no
// link has keeps the default.
LinkModel declared_links(const LinkCost& in_host, const LinkCost& between_hosts);
// Folds `other` into `into`, keeping the least favourable of the two: the
// larger latency, the smaller bandwidth. A figure without bandwidth (zero:
// no such link) leaves `into` as it is.
void take_least_favourable(LinkCost& into, const LinkCost& other);

// One call's shape and the model's terms for it, in seconds and bytes per second.
struct CostTerms {
  double n = 0;              // bytes, counted as nccl-tests does
  double p = 1;              // ranks
  double hosts = 1;          // H
  double g = 1;              // ranks per host (the largest host where unequal)
  double a_in = 0;           // a step between ranks of a host
  double a_net = 0;          // a step between hosts
  double a_step = 0;         // a flat algorithm's step: its slowest hop's
  double b_in = 1;           // one rank to another of its host
  double b_host = 1;         // a host's link, its ranks together
  double b_path = 1;         // a flat ring's bandwidth: its slowest kind of hop
  double gamma = 1;          // bytes a rank reduces per second
  double staging = 4 << 20;  // one peer's staging area, bytes
};
CostTerms cost_terms(const CostQuery& query);
CostQuery cost_query(CollOp op, double bytes, int ranks, int hosts, int per_host, const LinkModel& links);

// Each algorithm's time for `op` (one the algorithm implements), seconds.
double ring_cost(CollOp op, const CostTerms& t);
double rd_cost(CollOp op, const CostTerms& t);
double hd_cost(CollOp op, const CostTerms& t);
double tree_cost(CollOp op, const CostTerms& t);
double direct_cost(CollOp op, const CostTerms& t);
double dissemination_cost(CollOp op, const CostTerms& t);
double hier_cost(CollOp op, const CostTerms& t);

// "1.21 ms", "35 us": for explain() and logs.
std::string format_seconds(double seconds);

}  // namespace rdmx::coll
