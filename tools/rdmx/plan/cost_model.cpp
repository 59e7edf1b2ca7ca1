// SPDX-License-Identifier: MIT
#include "plan/cost_model.hpp"

#include <algorithm>
#include <cmath>

#include "rdmx/cost_model.hpp"
#include "rdmx/error.hpp"

namespace rdmx::cli::plan {
namespace {

// The costs of one cluster on one fabric, in seconds and bytes per second.
struct Costs {
  double n_nodes, g, p;
  double a_net, a_in;  // one step's latency between nodes, inside a node
  double a_step;       // a flat algorithm's step: as slow as its slowest hop
  double b_node;       // a node's bandwidth to the network, its NICs together
  double b_in;         // one rank's bandwidth to another rank of its node
  double b_path;       // a flat ring's bandwidth: its slowest kind of hop
  double gamma;        // bytes reduced per second per rank
};

Costs costs_of(const Fabric& f, const Cluster& c) {
  Costs k{};
  k.n_nodes = c.nodes;
  k.g = c.ranks_per_node;
  k.p = c.ranks();
  k.a_net = f.latency_us * 1e-6;
  k.a_in = f.intra_latency_us * 1e-6;
  k.a_step = c.nodes > 1 ? k.a_net : k.a_in;
  k.b_node = f.node_net_bytes_per_s();
  k.b_in = f.intra_gb_s * 1e9;
  if (c.nodes == 1) {
    k.b_path = k.b_in;
  } else if (c.ranks_per_node == 1) {
    k.b_path = k.b_node;
  } else {
    // A node's flat ring edges out (one per channel, a channel per NIC)
    // carry what one rank sends; its hops inside go at the intra rate.
    k.b_path = std::min(k.b_node, k.b_in);
  }
  k.gamma = f.reduce_gb_s * 1e9;
  return k;
}

double log2_ceil(double v) { return v <= 1 ? 0 : std::ceil(std::log2(v) - 1e-9); }

// NCCL's model. Its ring all_reduce: 2(p-1) steps, each rank sends
// 2(p-1)/p of the data and reduces (p-1)/p of it (Patarasuk and Yuan 2009;
// Thakur et al. 2005).
double ring_all_reduce(const Costs& k, double n) {
  return 2 * (k.p - 1) * k.a_step + 2 * (k.p - 1) / k.p * n / k.b_path + (k.p - 1) / k.p * n / k.gamma;
}

// NCCL's tree: a chain inside each node and a double binary tree across
// nodes, pipelined; a node sends about the whole vector up and down.
double tree_all_reduce(const Costs& k, double n) {
  const double lat = 2 * (log2_ceil(k.n_nodes) * k.a_net + (k.g - 1) * k.a_in);
  const double bw = k.n_nodes > 1 ? 2 * n / k.b_node : 2 * n / k.b_in;
  return lat + bw + n / k.gamma;
}

double ring_gather_like(const Costs& k, double n, bool reduces) {
  return (k.p - 1) * k.a_step + (k.p - 1) / k.p * n / k.b_path + (reduces ? (k.p - 1) / k.p * n / k.gamma : 0);
}

// A pipelined chain (every byte crosses each hop once, the hops overlap)
// against a binomial tree of whole-vector rounds.
double rooted(const Costs& k, double n, bool reduces, std::string* algo) {
  const double chain = (k.p - 1) * k.a_step + n / k.b_path + (reduces ? n / k.gamma : 0);
  const double tree = log2_ceil(k.p) * (k.a_step + n / k.b_path + (reduces ? n / k.gamma : 0));
  *algo = chain <= tree ? "ring" : "tree";
  return std::min(chain, tree);
}

std::vector<Estimate> nccl_algorithms(const Fabric& fabric, const Cluster& cluster, Collective op, double bytes) {
  const Costs k = costs_of(fabric, cluster);
  switch (op) {
    case Collective::AllReduce: return {{"ring", ring_all_reduce(k, bytes)}, {"tree", tree_all_reduce(k, bytes)}};
    case Collective::AllGather:
    case Collective::ReduceScatter: return {{"ring", ring_gather_like(k, bytes, op == Collective::ReduceScatter)}};
    case Collective::Broadcast:
    case Collective::Reduce: {
      std::string algo;
      const double t = rooted(k, bytes, op == Collective::Reduce, &algo);
      return {{algo, t}};
    }
  }
  return {};
}

CollOp coll_op(Collective op) {
  switch (op) {
    case Collective::AllReduce: return CollOp::AllReduce;
    case Collective::AllGather: return CollOp::AllGather;
    case Collective::ReduceScatter: return CollOp::ReduceScatter;
    case Collective::Broadcast: return CollOp::Broadcast;
    case Collective::Reduce: return CollOp::Reduce;
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
  q.between_hosts = {f.latency_us, f.node_net_bytes_per_s() / 1e9};
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
               {"reduce", "reduce", Collective::Reduce}};
  for (const auto& n : names) {
    if (name == n.a || name == n.b) {
      *op = n.op;
      return true;
    }
  }
  return false;
}

std::vector<Estimate> estimate_algorithms(const Fabric& fabric, const Cluster& cluster, Collective op, double bytes,
                                          Library library) {
  if (cluster.nodes < 1 || cluster.ranks_per_node < 1) {
    throw Error(ErrorCode::InvalidArgument,
                "a cluster needs at least one node of one rank, not " + std::to_string(cluster.nodes) + " x " +
                    std::to_string(cluster.ranks_per_node),
                {.op = "rdmx plan"});
  }
  if (cluster.ranks() == 1) return {{"local", 0}};
  if (library != Library::Rdmx) return nccl_algorithms(fabric, cluster, op, bytes);
  std::vector<Estimate> out;
  for (const AlgoCost& a : rdmx_prediction(fabric, cluster, op, bytes).algorithms) out.push_back({a.algo, a.seconds});
  return out;
}

Estimate estimate(const Fabric& fabric, const Cluster& cluster, Collective op, double bytes, Library library) {
  const auto all = estimate_algorithms(fabric, cluster, op, bytes, library);
  if (cluster.ranks() == 1) return all.front();
  if (library == Library::Rdmx) {
    const AlgoCost chosen = rdmx_prediction(fabric, cluster, op, bytes).chosen;
    return {chosen.algo, chosen.seconds};
  }
  if (op == Collective::AllReduce && library == Library::NcclRing) return all.front();
  // NCCL: the faster of its ring and tree, as its tuning model picks.
  return *std::min_element(all.begin(), all.end(),
                           [](const Estimate& a, const Estimate& b) { return a.seconds < b.seconds; });
}

}  // namespace rdmx::cli::plan
