// SPDX-License-Identifier: MIT
// The time of one collective on a fabric, and which algorithm each library
// would pick for a size, rank count and node count: rdmx's by the library's
// own cost model (include/rdmx/cost_model.hpp), NCCL's as its tuner costs
// its algorithms and protocols (nccl_model.hpp). docs/ADVISOR.md gives
// every formula and where it comes from.
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

// AllToAll: every rank sends a share of its buffer to every other rank (an
// MoE layer's dispatch and combine). SendRecv: each rank of a node sends a
// buffer to a peer, on the next node when there are several (a pipeline's
// stage boundary), all of the node's ranks at once.
enum class Collective { AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll, SendRecv };
const char* to_string(Collective op);
// "all_reduce", "allreduce" (nccl-tests), and the others likewise
// ("all_to_allv" as all_to_all; "send", "recv", "send_recv" as send_recv);
// false for operations the model does not cost.
bool parse_collective(const std::string& name, Collective* op);
// nccl-tests' bus bandwidth over algorithm bandwidth for `op` on `ranks`.
double bus_factor(Collective op, int ranks);

struct Cluster {
  int nodes = 1;
  int ranks_per_node = 1;  // GPUs per node: one rank each
  int ranks() const { return nodes * ranks_per_node; }
};

struct Estimate {
  std::string algo;  // "ring", "rd", "hd", "hier", "tree", "pat"
  double seconds = 0;
  std::string protocol;  // NCCL's: "LL", "LL128", "Simple"; empty for rdmx
};

// Every algorithm `library` runs for `op` at that size, with its time:
// rdmx's from the library's own model (include/rdmx/cost_model.hpp, which
// its communicators choose by), NCCL's as its tuner costs them
// (nccl_model.hpp), each with its fastest protocol. `bytes` counts as nccl-tests does: the whole buffer of all_reduce,
// broadcast and reduce, all_gather's output, reduce_scatter's input.
std::vector<Estimate> estimate_algorithms(const Fabric& fabric, const Cluster& cluster, Collective op, double bytes,
                                          Library library = Library::Rdmx);

// The algorithm `library` would run and its time: rdmx the lowest of its
// model (as a communicator of that shape chooses), NCCL the fastest
// algorithm and protocol (as its tuner picks), NCCL before 2.4 its ring.
Estimate estimate(const Fabric& fabric, const Cluster& cluster, Collective op, double bytes, Library library);

}  // namespace rdmx::cli::plan
