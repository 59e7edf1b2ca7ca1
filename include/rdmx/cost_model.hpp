// SPDX-License-Identifier: MIT
// rdmx/cost_model.hpp: the time the library predicts for each collective
// algorithm, and the one it would run, from the figures of its links. The
// communicator chooses by this model (docs/COLLECTIVES.md, "Choosing an
// algorithm"); `rdmx plan --library rdmx` asks it about fabrics that are not
// here (docs/ADVISOR.md).
#pragma once

#include <string>
#include <vector>

#include "rdmx/comm.hpp"

#include "rdmx/export.hpp"

RDMX_API_BEGIN

namespace rdmx {

// One kind of link as the model charges it: what one step of an algorithm
// waits for (a message's latency and the library's own per-step work), and
// the bytes per second of one large transfer, in GB/s (1e9 bytes).
struct LinkCost {
  double latency_us = 0;
  double bandwidth_gbps = 0;
};

struct CostQuery {
  CollOp op = CollOp::AllReduce;
  // As nccl-tests counts: the whole buffer of all_reduce, broadcast and
  // reduce, all_gather's output, reduce_scatter's input.
  double bytes = 0;
  int ranks = 1;
  int hosts = 1;
  // Ranks on each host when every host has as many, else 0 (the
  // hierarchical algorithms need equal hosts).
  int per_host = 1;
  LinkCost in_host;  // between two ranks of a host
  // A host's link to the others, which its ranks share when they cross at once.
  LinkCost between_hosts;
  double reduce_gbps = 5;  // bytes one rank reduces per second, GB/s
  // What one peer's staging area holds (RDMX_COLL_BUFFSIZE): halving-doubling's
  // exchanges larger than it stream through it piece by piece.
  double staging_bytes = 4 << 20;
};

struct AlgoCost {
  std::string algo;  // "ring", "rd", "hd", "tree", "direct", "dissemination", "hier"
  double seconds = 0;
};

struct CostPrediction {
  std::vector<AlgoCost> algorithms;  // every algorithm that can run the query, in the registry's order
  AlgoCost chosen;                   // the lowest: what a communicator of that shape runs
};

// Throws InvalidArgument for a query without ranks, hosts or figures.
CostPrediction predict_collective(const CostQuery& query);

}  // namespace rdmx

RDMX_API_END
