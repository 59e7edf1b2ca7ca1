// SPDX-License-Identifier: MIT
#include "plan/cost_model.hpp"

#include <algorithm>
#include <cmath>

#include "plan/nccl_model.hpp"
#include "rdmx/cost_model.hpp"
#include "rdmx/error.hpp"

namespace rdmx::cli::plan {
namespace {

CollOp coll_op(Collective op) {
  switch (op) {
    case Collective::AllReduce: return CollOp::AllReduce;
    case Collective::AllGather: return CollOp::AllGather;
    case Collective::ReduceScatter: return CollOp::ReduceScatter;
    case Collective::Broadcast: return CollOp::Broadcast;
    case Collective::Reduce: return CollOp::Reduce;
    case Collective::AllToAll: return CollOp::AllToAll;
    case Collective::SendRecv: return CollOp::SendRecv;
  }
  return CollOp::AllReduce;
}

// rdmx's own model (include/rdmx/cost_model.hpp), on the fabric's figures:
// a step's latency as the collective sees it inside a node and between
// nodes, a node's network bandwidth (its NICs together, shared by its
// ranks), one rank's bandwidth inside the node, the reduction rate.
CostPrediction rdmx_prediction(const Fabric& f, const Cluster& c, Collective op, double bytes) {
  CostQuery q;
  q.op = coll_op(op);
  q.bytes = bytes;
  q.ranks = c.ranks();
  q.hosts = c.nodes;
  q.per_host = c.ranks_per_node;
  q.in_host = {f.intra_latency_us, f.intra_gb_s};
  q.between_hosts = {f.latency_us, f.node_net_bytes_per_s(c.ranks_per_node) / 1e9};
  q.reduce_gbps = f.reduce_gb_s;
  return predict_collective(q);
}

}  // namespace

const char* to_string(Library library) {
  switch (library) {
    case Library::Rdmx: return "rdmx";
    case Library::Nccl: return "nccl";
    case Library::NcclRing: return "nccl-ring";
  }
  return "?";
}

Library parse_library(const std::string& name) {
  if (name == "rdmx") return Library::Rdmx;
  if (name == "nccl") return Library::Nccl;
  if (name == "nccl-ring") return Library::NcclRing;
  throw Error(ErrorCode::InvalidArgument, "unknown library '" + name + "'",
              {.op = "rdmx plan", .hint = "use rdmx, nccl or nccl-ring"});
}

const char* to_string(Collective op) {
  switch (op) {
    case Collective::AllReduce: return "all_reduce";
    case Collective::AllGather: return "all_gather";
    case Collective::ReduceScatter: return "reduce_scatter";
    case Collective::Broadcast: return "broadcast";
    case Collective::Reduce: return "reduce";
    case Collective::AllToAll: return "all_to_all";
    case Collective::SendRecv: return "send_recv";
  }
  return "?";
}

bool parse_collective(const std::string& name, Collective* op) {
  static const struct {
    const char* a;
    const char* b;
    Collective op;
  } names[] = {{"all_reduce", "allreduce", Collective::AllReduce},
               {"all_gather", "allgather", Collective::AllGather},
               {"reduce_scatter", "reducescatter", Collective::ReduceScatter},
               {"broadcast", "bcast", Collective::Broadcast},
               {"reduce", "reduce", Collective::Reduce},
               {"all_to_all", "alltoall", Collective::AllToAll},
               {"all_to_allv", "alltoallv", Collective::AllToAll},
               {"send_recv", "sendrecv", Collective::SendRecv},
               {"send", "send", Collective::SendRecv},
               {"recv", "recv", Collective::SendRecv}};
  for (const auto& n : names) {
    if (name == n.a || name == n.b) {
      *op = n.op;
      return true;
    }
  }
  return false;
}

double bus_factor(Collective op, int ranks) {
  const double p = ranks;
  switch (op) {
    case Collective::AllReduce: return 2 * (p - 1) / p;
    case Collective::AllGather:
    case Collective::ReduceScatter:
    case Collective::AllToAll: return (p - 1) / p;
    default: return 1;
  }
}

namespace {

// Point-to-point traffic, as NCCL runs all_to_all (grouped sends and
// receives to every peer at once) and a pipeline's send/recv: the bytes
// through the links that carry them, a node's ranks sharing its network,
// after one step's latency.
Estimate point_to_point(const Fabric& f, const Cluster& c, Collective op, double bytes, Library library) {
  const double g = c.ranks_per_node, p = c.ranks();
  const double net = f.node_net_bytes_per_s(c.ranks_per_node);
  const double intra = f.intra_gb_s * 1e9;
  const bool across = c.nodes > 1;
  double seconds = (across ? f.latency_us : f.intra_latency_us) * 1e-6;
  if (op == Collective::SendRecv) {
    seconds += across ? bytes * g / net : bytes / intra;
  } else {
    const double to_each = bytes / p;
    double moved = (g - 1) * to_each / intra;
    if (across) moved = std::max(moved, g * (p - g) * to_each / net);
    seconds += moved;
  }
  return {"p2p", seconds, library == Library::Rdmx ? "" : "Simple"};
}

}  // namespace

std::vector<Estimate> estimate_algorithms(const Fabric& fabric, const Cluster& cluster, Collective op, double bytes,
                                          Library library) {
  if (cluster.nodes < 1 || cluster.ranks_per_node < 1) {
    throw Error(ErrorCode::InvalidArgument,
                "a cluster needs at least one node of one rank, not " + std::to_string(cluster.nodes) + " x " +
                    std::to_string(cluster.ranks_per_node),
                {.op = "rdmx plan"});
  }
  if (cluster.ranks() == 1) return {{"local", 0}};
  // rdmx costs all_to_all by its own algorithms; NCCL has none but
  // point-to-point, and neither has a collective for send/recv.
  if (op == Collective::SendRecv || (op == Collective::AllToAll && library != Library::Rdmx)) {
    return {point_to_point(fabric, cluster, op, bytes, library)};
  }
  if (library != Library::Rdmx) {
    // Each algorithm with the protocol NCCL would run it with.
    std::vector<Estimate> out;
    for (const NcclCandidate& c : nccl_candidates(fabric, cluster, op, bytes, library == Library::NcclRing)) {
      auto same = std::find_if(out.begin(), out.end(), [&](const Estimate& e) { return e.algo == c.algo; });
      if (same == out.end()) {
        out.push_back({c.algo, c.seconds, c.protocol});
      } else if (c.seconds < same->seconds) {
        *same = {c.algo, c.seconds, c.protocol};
      }
    }
    return out;
  }
  std::vector<Estimate> out;
  for (const AlgoCost& a : rdmx_prediction(fabric, cluster, op, bytes).algorithms) out.push_back({a.algo, a.seconds});
  return out;
}

Estimate estimate(const Fabric& fabric, const Cluster& cluster, Collective op, double bytes, Library library) {
  const auto all = estimate_algorithms(fabric, cluster, op, bytes, library);
  if (cluster.ranks() == 1 || op == Collective::SendRecv) return all.front();
  if (library == Library::Rdmx) {
    const AlgoCost chosen = rdmx_prediction(fabric, cluster, op, bytes).chosen;
    return {chosen.algo, chosen.seconds};
  }
  // NCCL: the fastest of its algorithms and protocols, as its tuner picks.
  return *std::min_element(all.begin(), all.end(),
                           [](const Estimate& a, const Estimate& b) { return a.seconds < b.seconds; });
}

}  // namespace rdmx::cli::plan
