// SPDX-License-Identifier: MIT
// The time of one collective on a fabric: alpha-beta-gamma costs (a message,
// a byte across the network or inside a node, a byte reduced) of the
// algorithms rdmx and NCCL run, and which of them each library would pick
// for a size, rank count and node count. docs/ADVISOR.md gives every formula
// and where it comes from.
#pragma once

#include <string>
#include <vector>

#include "plan/fabric.hpp"

namespace rdmx::cli::plan {

// Whose algorithm choice to model: rdmx's table, NCCL's (ring or tree,
// whichever is faster), or NCCL before 2.4 (ring only, as published
// results of 2017-2018 ran).
enum class Library { Rdmx, Nccl, NcclRing };
const char* to_string(Library library);
Library parse_library(const std::string& name);

enum class Collective { AllReduce, AllGather, ReduceScatter, Broadcast, Reduce };
const char* to_string(Collective op);
// "all_reduce", "allreduce" (nccl-tests), and the other four likewise;
// false for operations the model does not cost.
bool parse_collective(const std::string& name, Collective* op);

struct Cluster {
  int nodes = 1;
  int ranks_per_node = 1;  // GPUs per node: one rank each
  int ranks() const { return nodes * ranks_per_node; }
};

struct Estimate {
  std::string algo;  // "ring", "rd", "hd", "hier", "tree"
  double seconds = 0;
};

// Every algorithm the model knows for `op` at that size, with its time.
// `bytes` counts as nccl-tests does: the whole buffer of all_reduce,
// broadcast and reduce, all_gather's output, reduce_scatter's input.
std::vector<Estimate> estimate_algorithms(const Fabric& fabric, const Cluster& cluster, Collective op, double bytes);

// The algorithm `library` would run and its time: rdmx by its selection
// table (src/coll/selection.cpp, over a network), NCCL by the fastest of
// ring and tree (as its tuning model picks).
Estimate estimate(const Fabric& fabric, const Cluster& cluster, Collective op, double bytes, Library library);

}  // namespace rdmx::cli::plan
