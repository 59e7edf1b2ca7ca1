// SPDX-License-Identifier: MIT
// NCCL's collectives as its own tuner costs them (docs/ADVISOR.md, "NCCL as
// its tuner models it"): every algorithm and protocol NCCL would consider
// gets a latency and a bandwidth, and the fastest wins, as in NCCL. The
// latencies are the tuner's, charged where it charges them (the network's
// only on the steps that cross nodes); the bandwidths are the fabric's
// links as each algorithm loads them (the 2-node tree sends half of what a
// ring sends over the network), capped as the tuner caps each protocol.
#pragma once

#include <string>
#include <vector>

#include "plan/cost_model.hpp"
#include "plan/fabric.hpp"

namespace rdmx::cli::plan {

struct NcclCandidate {
  std::string algo;      // "ring", "tree", "pat"
  std::string protocol;  // "LL", "LL128", "Simple"
  double seconds = 0;
};

// Every (algorithm, protocol) NCCL runs for `op` on that cluster, with its
// time; `ring_only` as NCCL before 2.4 (no tree, no LL128). `bytes` as
// nccl-tests counts them (cost_model.hpp). Throws for a GPU it has no
// tables for.
std::vector<NcclCandidate> nccl_candidates(const Fabric& fabric, const Cluster& cluster, Collective op, double bytes,
                                           bool ring_only);

// The generation of NCCL's tables a GPU name falls in ("Volta", "Ampere",
// "Hopper", "Blackwell"), or an error naming the GPU.
std::string nccl_generation(const std::string& gpu);

}  // namespace rdmx::cli::plan
