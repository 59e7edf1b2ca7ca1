// SPDX-License-Identifier: MIT
#include "plan/cost_model.hpp"

#include <algorithm>
#include <cmath>

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

// Ring all_reduce: 2(p-1) steps, each rank sends 2(p-1)/p of the data and
// reduces (p-1)/p of it (Patarasuk and Yuan 2009; Thakur et al. 2005).
double ring_all_reduce(const Costs& k, double n) {
  return 2 * (k.p - 1) * k.a_step + 2 * (k.p - 1) / k.p * n / k.b_path + (k.p - 1) / k.p * n / k.gamma;
}

// Recursive doubling: lg(p) rounds of the whole vector. Ranks are numbered
// node by node, so the last lg(nodes) rounds cross nodes, where the node's
// g ranks send at once through its NICs.
double rd_all_reduce(const Costs& k, double n) {
  const double inter = log2_ceil(k.n_nodes), intra = log2_ceil(k.g);
  double t = intra * (k.a_in + n / k.b_in + n / k.gamma);
  if (k.n_nodes > 1) t += inter * (k.a_net + k.g * n / k.b_node + n / k.gamma);
  return t;
}

// Rabenseifner: recursive halving reduce_scatter, then doubling all_gather.
// The rounds across nodes come first in the halving: each rank sends
// (nodes-1)/nodes of the vector across per phase, its node g times that;
// inside the node it moves (g-1)/g of the 1/nodes it kept.
double hd_all_reduce(const Costs& k, double n) {
  const double inter = log2_ceil(k.n_nodes), intra = log2_ceil(k.g);
  double t = 2 * intra * k.a_in + 2 * (k.g - 1) / k.g * (n / k.n_nodes) / k.b_in;
  if (k.n_nodes > 1) t += 2 * inter * k.a_net + 2 * k.g * n * (k.n_nodes - 1) / k.n_nodes / k.b_node;
  return t + (k.p - 1) / k.p * n / k.gamma;
}

// Across nodes on a shard of `n` bytes per node: rings (one per local rank)
// or a double binary tree, whichever is faster, as hier picks.
double across_nodes_all_reduce(const Costs& k, double node_bytes) {
  if (k.n_nodes <= 1) return 0;
  const double ring = 2 * (k.n_nodes - 1) * k.a_net + 2 * (k.n_nodes - 1) / k.n_nodes * node_bytes / k.b_node +
                      (k.n_nodes - 1) / k.n_nodes * node_bytes / k.g / k.gamma;
  const double tree = 2 * log2_ceil(k.n_nodes) * k.a_net + 2 * node_bytes / k.b_node + node_bytes / k.g / k.gamma;
  return std::min(ring, tree);
}

// hier: reduce_scatter inside each node, all_reduce of each rank's share
// across nodes (a node sends 2(nodes-1)/nodes of the data, the least any
// algorithm must), all_gather inside the node.
double hier_all_reduce(const Costs& k, double n) {
  const double inside = (k.g - 1) * k.a_in + (k.g - 1) / k.g * n / k.b_in;
  return 2 * inside + (k.g - 1) / k.g * n / k.gamma + across_nodes_all_reduce(k, n);
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

double hier_gather_like(const Costs& k, double n, bool reduces) {
  const double inside = (k.g - 1) * k.a_in + (k.g - 1) / k.g * n / k.b_in;
  const double across = (k.n_nodes - 1) * k.a_net + (k.n_nodes - 1) / k.n_nodes * n / k.b_node;
  return inside + across + (reduces ? (k.p - 1) / k.p * n / k.gamma : 0);
}

// A pipelined chain (every byte crosses each hop once, the hops overlap)
// against a binomial tree of whole-vector rounds.
double rooted(const Costs& k, double n, bool reduces, std::string* algo) {
  const double chain = (k.p - 1) * k.a_step + n / k.b_path + (reduces ? n / k.gamma : 0);
  const double tree = log2_ceil(k.p) * (k.a_step + n / k.b_path + (reduces ? n / k.gamma : 0));
  *algo = chain <= tree ? "ring" : "tree";
  return std::min(chain, tree);
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

std::vector<Estimate> estimate_algorithms(const Fabric& fabric, const Cluster& cluster, Collective op, double bytes) {
  if (cluster.nodes < 1 || cluster.ranks_per_node < 1) {
    throw Error(ErrorCode::InvalidArgument,
                "a cluster needs at least one node of one rank, not " + std::to_string(cluster.nodes) + " x " +
                    std::to_string(cluster.ranks_per_node),
                {.op = "rdmx plan"});
  }
  if (cluster.ranks() == 1) return {{"local", 0}};
  const Costs k = costs_of(fabric, cluster);
  const bool layered = cluster.nodes > 1 && cluster.ranks_per_node > 1;
  std::vector<Estimate> out;
  switch (op) {
    case Collective::AllReduce:
      out.push_back({"ring", ring_all_reduce(k, bytes)});
      out.push_back({"rd", rd_all_reduce(k, bytes)});
      if (k.p > 2) out.push_back({"hd", hd_all_reduce(k, bytes)});
      if (layered) out.push_back({"hier", hier_all_reduce(k, bytes)});
      out.push_back({"tree", tree_all_reduce(k, bytes)});
      break;
    case Collective::AllGather:
    case Collective::ReduceScatter: {
      const bool reduces = op == Collective::ReduceScatter;
      out.push_back({"ring", ring_gather_like(k, bytes, reduces)});
      if (layered) out.push_back({"hier", hier_gather_like(k, bytes, reduces)});
      break;
    }
    case Collective::Broadcast:
    case Collective::Reduce: {
      std::string algo;
      const double t = rooted(k, bytes, op == Collective::Reduce, &algo);
      out.push_back({algo, t});
      break;
    }
  }
  return out;
}

Estimate estimate(const Fabric& fabric, const Cluster& cluster, Collective op, double bytes, Library library) {
  const auto all = estimate_algorithms(fabric, cluster, op, bytes);
  const auto named = [&](const char* name) {
    for (const auto& e : all) {
      if (e.algo == name) return e;
    }
    return all.front();
  };
  if (op == Collective::AllReduce && all.size() > 1) {
    if (library == Library::NcclRing) return named("ring");
    if (library == Library::Nccl) {
      const Estimate ring = named("ring"), tree = named("tree");
      return ring.seconds <= tree.seconds ? ring : tree;
    }
    // rdmx's table over a network (src/coll/selection.cpp).
    const int p = cluster.ranks();
    const double rd_max = p == 2 ? 256 * 1024 : p <= 4 ? 64 * 1024 : 16 * 1024;
    if (bytes <= rd_max) return named("rd");
    if (cluster.nodes > 1 && cluster.ranks_per_node > 1 && bytes >= 256 * 1024) return named("hier");
    if (bytes <= 4 * 1024 * 1024 && p > 2) return named("hd");
    return named("ring");
  }
  // The other operations: the fastest the model knows, for either library.
  return *std::min_element(all.begin(), all.end(),
                           [](const Estimate& a, const Estimate& b) { return a.seconds < b.seconds; });
}

}  // namespace rdmx::cli::plan
