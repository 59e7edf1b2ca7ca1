// SPDX-License-Identifier: MIT
#include "coll/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "coll/algo_registry.hpp"
#include "coll/algorithms.hpp"
#include "rdmx/error.hpp"

namespace rdmx::coll {
namespace {

// Where the recursive algorithms' pairwise exchanges were measured slower
// than the ring's neighbour transfers of the same bytes, they reach this
// share of the link (docs/COLLECTIVES.md, "Choosing an algorithm", gives
// the runs; the cause is not found): across more than two hosts once their
// largest exchange is larger than the exchanges that measured the link (up to that size rd and hd ran at their model;
// between two hosts the exchange is the ring's), rd's doubling all_gather inside a host, and halving-doubling inside a
// host once its first exchange outgrows a peer's staging area.
constexpr double kRecursiveShare = 0.65;
constexpr double kMeasuredExchangeBytes = 256 * 1024;  // link_probe.cpp's large exchange

double across_share(const CostTerms& t, double largest_exchange) {
  return t.hosts > 2 && largest_exchange > kMeasuredExchangeBytes ? kRecursiveShare : 1.0;
}
double hd_inside_share(const CostTerms& t) { return t.n / 2 > t.staging ? kRecursiveShare : 1.0; }

double log2_ceil(double v) { return v <= 1 ? 0 : std::ceil(std::log2(v) - 1e-9); }
double log2_floor(double v) { return v <= 1 ? 0 : std::floor(std::log2(v) + 1e-9); }

bool reduces(CollOp op) { return op == CollOp::AllReduce || op == CollOp::ReduceScatter || op == CollOp::Reduce; }

// Bytes moved and reduced in the same rounds. Between hosts the network
// carries the bytes while the core reduces the chunk before: the slower of
// the two. Inside a host the same cores copy and reduce: both.
double move_and_reduce(const CostTerms& t, double moved_s, double reduced_s) {
  return t.hosts > 1 ? std::max(moved_s, reduced_s) : moved_s + reduced_s;
}

// rd and hd fold a rank count that is no power of two: the extra ranks hand
// their data to a partner and get the result back, two more steps.
double fold(const CostTerms& t, double in_bytes, double out_bytes) {
  const double p2 = std::exp2(log2_floor(t.p));
  if (p2 == t.p) return 0;
  return 2 * t.a_step + (in_bytes + out_bytes) / t.b_path;
}

// Rounds of rd and hd: ranks are numbered host by host, so the first
// lg(g) rounds stay inside a host and the last lg(H) cross, every rank of a
// host at once through its link.
struct Rounds {
  double inside, across;
};
Rounds rounds(const CostTerms& t) {
  if (t.hosts <= 1) return {log2_floor(t.p), 0};
  return {log2_ceil(t.g), log2_ceil(t.hosts)};
}

}  // namespace

LinkModel declared_links(const LinkCost& in_host, const LinkCost& between_hosts) {
  LinkModel m;
  if (in_host.bandwidth_gbps > 0) m.in_host = {in_host.latency_us + kStepOverheadUs, in_host.bandwidth_gbps};
  if (between_hosts.bandwidth_gbps > 0)
    m.between_hosts = {between_hosts.latency_us + kStepOverheadUs, between_hosts.bandwidth_gbps};
  m.basis = "declared";
  return m;
}

void take_least_favourable(LinkCost& into, const LinkCost& other) {
  if (other.bandwidth_gbps <= 0) return;
  into.latency_us = std::max(into.latency_us, other.latency_us);
  into.bandwidth_gbps =
      into.bandwidth_gbps > 0 ? std::min(into.bandwidth_gbps, other.bandwidth_gbps) : other.bandwidth_gbps;
}

CostQuery cost_query(CollOp op, double bytes, int ranks, int hosts, int per_host, const LinkModel& links) {
  return {.op = op,
          .bytes = bytes,
          .ranks = ranks,
          .hosts = hosts,
          .per_host = per_host,
          .in_host = links.in_host,
          .between_hosts = links.between_hosts,
          .reduce_gbps = links.reduce_gbps,
          .staging_bytes = links.staging_bytes};
}

CostTerms cost_terms(const CostQuery& q) {
  CostTerms t;
  t.n = q.bytes;
  t.p = q.ranks;
  t.hosts = std::max(q.hosts, 1);
  t.g = q.per_host > 0 ? q.per_host : std::ceil(t.p / t.hosts);
  t.a_in = q.in_host.latency_us * 1e-6;
  t.a_net = q.between_hosts.latency_us * 1e-6;
  t.a_step = t.hosts > 1 ? t.a_net : t.a_in;
  t.b_in = q.in_host.bandwidth_gbps * 1e9;
  t.b_host = q.between_hosts.bandwidth_gbps * 1e9;
  // A flat ring crosses each host's link once (ranks numbered host by
  // host); its hops inside go at the in-host rate.
  t.b_path = t.hosts <= 1 ? t.b_in : t.g <= 1 ? t.b_host : std::min(t.b_host, t.b_in);
  t.gamma = q.reduce_gbps * 1e9;
  t.staging = q.staging_bytes;
  return t;
}

// The ring: all_reduce is a reduce_scatter (each rank sends and reduces
// (p-1)/p of the data) then an all_gather ((p-1)/p more), 2(p-1) steps;
// broadcast and reduce a pipelined chain (every byte crosses each hop once).
double ring_cost(CollOp op, const CostTerms& t) {
  const double share = (t.p - 1) / t.p * t.n;
  switch (op) {
    case CollOp::AllReduce:
      return 2 * (t.p - 1) * t.a_step + move_and_reduce(t, share / t.b_path, share / t.gamma) + share / t.b_path;
    case CollOp::AllGather: return (t.p - 1) * t.a_step + share / t.b_path;
    case CollOp::ReduceScatter: return (t.p - 1) * t.a_step + move_and_reduce(t, share / t.b_path, share / t.gamma);
    default: return (t.p - 1) * t.a_step + move_and_reduce(t, t.n / t.b_path, reduces(op) ? t.n / t.gamma : 0);
  }
}

// Recursive doubling: all_reduce exchanges the whole vector each round;
// all_gather doubles what it sends, a host's ranks together sending
// (H-1)/H of it across.
double rd_cost(CollOp op, const CostTerms& t) {
  const Rounds r = rounds(t);
  if (op == CollOp::AllGather) {
    double s = r.inside * t.a_in + (t.g - 1) / t.g * (t.n / t.hosts) / t.b_in / kRecursiveShare;
    if (t.hosts > 1)
      s += r.across * t.a_net + t.g * (t.hosts - 1) / t.hosts * t.n / t.b_host / across_share(t, t.n / 2);
    return s + fold(t, t.n / t.p, t.n);
  }
  double s = r.inside * (t.a_in + t.n / t.b_in + t.n / t.gamma);
  if (t.hosts > 1) {
    const double moved = t.g * t.n / t.b_host / across_share(t, t.n);
    s += r.across * (t.a_net + move_and_reduce(t, moved, t.n / t.gamma));
  }
  return s + fold(t, t.n, t.n);
}

// Halving-doubling (Rabenseifner): recursive halving leaves each rank 1/p
// of the sum, recursive doubling gathers it back; the halving's rounds
// across hosts come first, each rank sending (H-1)/H of the vector across
// per phase, its host g times that.
double hd_cost(CollOp op, const CostTerms& t) {
  const Rounds r = rounds(t);
  const double phases = op == CollOp::AllReduce ? 2 : 1;
  const double g = t.hosts > 1 ? t.g : std::exp2(r.inside);  // a host's participants, after the fold
  double s = phases * r.inside * t.a_in + phases * (g - 1) / g * (t.n / t.hosts) / t.b_in / hd_inside_share(t);
  if (t.hosts > 1) {
    s += phases * r.across * t.a_net +
         phases * t.g * t.n * (t.hosts - 1) / t.hosts / t.b_host / across_share(t, t.n / 2);
  }
  return s + (t.p - 1) / t.p * t.n / t.gamma + fold(t, t.n, op == CollOp::AllReduce ? t.n : t.n / t.p);
}

// Binomial trees: lg(p) rounds of the whole vector, streamed; all_reduce
// reduces up one tree and broadcasts down it.
double tree_cost(CollOp op, const CostTerms& t) {
  const double depth = log2_ceil(t.p);
  const double round = t.a_step + move_and_reduce(t, t.n / t.b_path, reduces(op) ? t.n / t.gamma : 0);
  return (op == CollOp::AllReduce ? 2 : 1) * depth * round;
}

// Every pair at once: p-1 messages, each a step's work for the rank that
// posts and completes it; the bytes go through the sender's own links (a
// host's ranks share its link for those to other hosts), and the receiver
// reduces what arrives in rank order after the transfers.
double direct_cost(CollOp op, const CostTerms& t) {
  double out = t.n;  // what one rank sends to each peer
  double reduced = 0;
  switch (op) {
    case CollOp::AllReduce: reduced = (t.p - 1) * t.n; break;
    case CollOp::AllGather:
    case CollOp::AllToAll:
    case CollOp::AllToAllv:
    case CollOp::Gather:
    case CollOp::Scatter: out = t.n / t.p; break;
    case CollOp::ReduceScatter:
      out = t.n / t.p;
      reduced = (t.p - 1) / t.p * t.n;
      break;
    case CollOp::Reduce: reduced = (t.p - 1) * t.n; break;
    default: break;
  }
  double moved = (t.p - 1) * out / t.b_in;
  if (t.hosts > 1) moved = std::max((t.g - 1) * out / t.b_in, t.g * (t.p - t.g) * out / t.b_host);
  return (t.p - 1) * t.a_step + moved + reduced / t.gamma;
}

// Dissemination: ceil(lg p) rounds of an empty message.
double dissemination_cost(CollOp, const CostTerms& t) { return log2_ceil(t.p) * t.a_step; }

// By host: inside each host a ring (or chain), across hosts one ring per
// local rank, each carrying 1/g of the data, so a host's link carries
// 2(H-1)/H of it for all_reduce, the least any algorithm must; across hosts
// rings or a double binary tree, whichever is faster, as hier picks.
double hier_cost(CollOp op, const CostTerms& t) {
  const double H = t.hosts, g = t.g, n = t.n;
  const double inside = (g - 1) * t.a_in + (g - 1) / g * n / t.b_in;
  switch (op) {
    case CollOp::AllReduce: {
      double across = 0;
      if (H > 1) {
        const double ring = 2 * (H - 1) * t.a_net + 2 * (H - 1) / H * n / t.b_host;
        const double tree = 2 * log2_ceil(H) * t.a_net + 2 * n / t.b_host;
        across = std::min(ring, tree);
      }
      // Latency-bound sizes take trees inside the hosts too (a binomial
      // reduce to the host's first rank and a broadcast back).
      if (n < static_cast<double>(kHierRingMin)) {
        const double depth = log2_ceil(g);
        return 2 * depth * (t.a_in + n / t.b_in) + depth * n / t.gamma + across;
      }
      return 2 * inside + (g - 1) / g * n / t.gamma + across;
    }
    case CollOp::AllGather:
    case CollOp::ReduceScatter: {
      const double across = (H - 1) * t.a_net + (H - 1) / H * n / t.b_host;
      return inside + across + (reduces(op) ? (t.p - 1) / t.p * n / t.gamma : 0);
    }
    default:
      return (H - 1) * t.a_net + (g - 1) * t.a_in +
             move_and_reduce(t, n / std::min(t.b_host, t.b_in), reduces(op) ? n / t.gamma : 0);
  }
}

std::string format_seconds(double seconds) {
  char text[32];
  if (seconds >= 1) {
    std::snprintf(text, sizeof text, "%.3g s", seconds);
  } else if (seconds >= 1e-3) {
    std::snprintf(text, sizeof text, "%.3g ms", seconds * 1e3);
  } else {
    std::snprintf(text, sizeof text, "%.3g us", seconds * 1e6);
  }
  return text;
}

}  // namespace rdmx::coll

namespace rdmx {

CostPrediction predict_collective(const CostQuery& query) {
  const bool figures = query.in_host.bandwidth_gbps > 0 && query.reduce_gbps > 0 &&
                       (query.hosts <= 1 || query.between_hosts.bandwidth_gbps > 0);
  if (query.ranks < 1 || query.hosts < 1 || query.hosts > query.ranks || !figures || query.bytes < 0) {
    throw Error(ErrorCode::InvalidArgument,
                "predict_collective: " + std::to_string(query.ranks) + " ranks on " + std::to_string(query.hosts) +
                    " hosts, " + std::to_string(query.bytes) + " bytes, bandwidths " +
                    std::to_string(query.in_host.bandwidth_gbps) + " / " +
                    std::to_string(query.between_hosts.bandwidth_gbps) + " GB/s, reduction " +
                    std::to_string(query.reduce_gbps) + " GB/s",
                {.op = "cost model",
                 .hint = "give at least one rank per host, a positive bandwidth for each kind of link the "
                         "ranks use and a positive reduction rate"});
  }
  CostPrediction out;
  if (query.ranks == 1) {
    out.algorithms.push_back({"local", 0});
    out.chosen = out.algorithms.front();
    return out;
  }
  const coll::CostTerms terms = coll::cost_terms(query);
  const coll::Placement shape{query.ranks, query.hosts, query.per_host};
  for (const coll::AlgoRow& row : coll::algo_rows()) {
    if (!row.implements(query.op) || row.refuses(shape, false) != nullptr) continue;
    out.algorithms.push_back({row.name, row.cost(query.op, terms)});
  }
  if (out.algorithms.empty()) {
    throw Error(ErrorCode::InvalidArgument, std::string("predict_collective: no algorithm for ") + to_string(query.op),
                {.op = "cost model", .hint = "the model costs the collective operations, not point to point"});
  }
  // Of predictions equal but for rounding, the first row's.
  out.chosen = out.algorithms.front();
  for (const AlgoCost& a : out.algorithms) {
    if (a.seconds < out.chosen.seconds * (1 - 1e-9)) out.chosen = a;
  }
  return out;
}

}  // namespace rdmx
