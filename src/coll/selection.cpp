// SPDX-License-Identifier: MIT
#include "coll/selection.hpp"

#include <sstream>

#include "rdmx/error.hpp"

namespace rdmx::coll {
namespace {

constexpr std::size_t kHierarchicalMin = 256 * 1024;
constexpr std::size_t kHalvingDoublingMax = 4 << 20;

constexpr CollOp kOps[] = {CollOp::AllReduce, CollOp::AllGather, CollOp::ReduceScatter, CollOp::Broadcast,
                           CollOp::Reduce,    CollOp::AllToAll,  CollOp::AllToAllv,     CollOp::Gather,
                           CollOp::Scatter,   CollOp::Barrier};

Algo parse_algo(const std::string& name) {
  for (int a = 0; a < kAlgoCount; ++a) {
    if (name == to_string(static_cast<Algo>(a))) return static_cast<Algo>(a);
  }
  if (name == "recursive_doubling") return Algo::RecursiveDoubling;
  if (name == "halving_doubling") return Algo::HalvingDoubling;
  return Algo::None;
}

std::string names(const std::vector<Algo>& algos) {
  std::string out;
  for (Algo a : algos) out += (out.empty() ? "" : ", ") + std::string(to_string(a));
  return out;
}

bool supports(CollOp op, Algo algo) {
  for (Algo a : AlgoSelector::supported(op)) {
    if (a == algo) return true;
  }
  return false;
}

}  // namespace

const std::vector<Algo>& AlgoSelector::supported(CollOp op) {
  static const std::vector<Algo> all_reduce{Algo::Ring,   Algo::RecursiveDoubling, Algo::HalvingDoubling, Algo::Tree,
                                            Algo::Direct, Algo::Hierarchical};
  static const std::vector<Algo> all_gather{Algo::Ring, Algo::RecursiveDoubling, Algo::Direct, Algo::Hierarchical};
  static const std::vector<Algo> reduce_scatter{Algo::Ring, Algo::HalvingDoubling, Algo::Direct, Algo::Hierarchical};
  static const std::vector<Algo> rooted{Algo::Tree, Algo::Ring, Algo::Direct, Algo::Hierarchical};
  static const std::vector<Algo> direct{Algo::Direct};
  static const std::vector<Algo> barrier{Algo::Dissemination, Algo::Direct};
  static const std::vector<Algo> none{};
  switch (op) {
    case CollOp::AllReduce: return all_reduce;
    case CollOp::AllGather: return all_gather;
    case CollOp::ReduceScatter: return reduce_scatter;
    case CollOp::Broadcast:
    case CollOp::Reduce: return rooted;
    case CollOp::AllToAll:
    case CollOp::AllToAllv:
    case CollOp::Gather:
    case CollOp::Scatter: return direct;
    case CollOp::Barrier: return barrier;
    default: return none;
  }
}

AlgoSelector::AlgoSelector(const std::string& spec) : spec_(spec) {
  forced_.fill(Algo::None);
  if (spec.empty()) return;
  std::stringstream list(spec);
  std::string item;
  while (std::getline(list, item, ',')) {
    if (item.empty()) continue;
    const auto colon = item.find(':');
    const std::string name = colon == std::string::npos ? item : item.substr(colon + 1);
    const Algo algo = parse_algo(name);
    if (algo == Algo::None || algo == Algo::Local) {
      throw Error(ErrorCode::Config, "RDMX_ALGO: unknown algorithm '" + name + "' in '" + spec + "'",
                  {.op = "algorithm selection",
                   .hint = "use ring, rd, hd, tree, direct, dissemination or hier, for every operation or per "
                           "operation as all_reduce:rd,broadcast:tree"});
    }
    if (colon == std::string::npos) {
      bool any = false;
      for (CollOp op : kOps) {
        if (supports(op, algo)) {
          forced_[static_cast<std::size_t>(op)] = algo;
          any = true;
        }
      }
      if (!any) {
        throw Error(ErrorCode::Config, "RDMX_ALGO: no operation implements '" + name + "'",
                    {.op = "algorithm selection"});
      }
      continue;
    }
    const std::string op_name = item.substr(0, colon);
    bool found = false;
    for (CollOp op : kOps) {
      if (op_name != to_string(op)) continue;
      found = true;
      if (!supports(op, algo)) {
        throw Error(ErrorCode::Config, "RDMX_ALGO: " + op_name + " has no algorithm '" + name + "'",
                    {.op = "algorithm selection", .hint = op_name + " implements: " + names(supported(op))});
      }
      forced_[static_cast<std::size_t>(op)] = algo;
    }
    if (!found) {
      throw Error(ErrorCode::Config, "RDMX_ALGO: unknown operation '" + op_name + "' in '" + spec + "'",
                  {.op = "algorithm selection",
                   .hint = "operations: all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all, "
                           "all_to_allv, gather, scatter, barrier"});
    }
  }
}

void AlgoSelector::set_layout(int hosts, int per_host) {
  hosts_ = hosts;
  per_host_ = per_host;
  for (CollOp op : kOps) {
    if (forced_[static_cast<std::size_t>(op)] == Algo::Hierarchical && per_host == 0) {
      throw Error(ErrorCode::Config,
                  std::string("RDMX_ALGO forces hier for ") + to_string(op) + " ('" + spec_ +
                      "'), but the hosts of this communicator have unequal rank counts",
                  {.op = "algorithm selection",
                   .hint = "start as many ranks on every host, or leave hier out of RDMX_ALGO (RDMX_DEBUG=INFO "
                           "logs the topology)"});
    }
  }
}

// Recursive doubling sends the whole vector in each of its log2(n) rounds;
// halving-doubling and the ring send about twice the vector in 2 log2(n) or
// 2(n-1) rounds. With a round's latency a and a byte's cost b, rd wins below
// about log2(n) a / (b (log2(n) - 2(n-1)/n)) bytes: always at 2 ranks (the
// same bytes in half the rounds), below about 4 a/b at 4, 2.4 a/b at 8.
// a/b is about 15 KB over shm and 60 KB over tcp on loopback (20 us, 3 GB/s;
// a 1 GbE link is nearer 10 KB, a 100 GbE one 200 KB). Measured here
// (docs/PERFORMANCE.md, "all_reduce by rounds over tcp"): over tcp, rd at 2
// ranks takes half the ring's time up to 512 KiB, at 4 ranks 0.5x hd's at
// 64 KiB; over shm rd is even with the ring at 2 ranks up to 128 KiB and
// ahead of hd at 4 ranks up to 64 KiB; at 8 and 16 ranks on 16 cores hd is
// 2x ahead at 64 KiB.
std::size_t AlgoSelector::recursive_doubling_max(int ranks) const {
  if (ranks == 2 && network_) return 256 * 1024;
  if (ranks <= 4) return 64 * 1024;
  return 16 * 1024;
}

// The table. Thresholds come from bench/run_coll.sh on the development
// machine (docs/PERFORMANCE.md): latency-bound sizes take the fewest rounds,
// bandwidth-bound sizes the ring, whose every rank sends and receives
// 2(n-1)/n of the data once.
Algo AlgoSelector::table(CollOp op, std::size_t bytes, int ranks) const {
  if (ranks == 1) return Algo::Local;
  // Several hosts of several ranks, bandwidth-bound: cross each host's link
  // as little as any algorithm can (docs/PERFORMANCE.md, the bed). Small
  // messages stay flat: on the bed recursive doubling beat the host trees.
  const auto by_host = [&](std::size_t b) { return hosts_ > 1 && per_host_ > 1 && b >= kHierarchicalMin; };
  switch (op) {
    case CollOp::AllReduce:
      if (bytes <= recursive_doubling_max(ranks)) return Algo::RecursiveDoubling;
      // Several hosts of several ranks: cross each host's link once, every
      // local rank carrying a share (docs/COLLECTIVES.md, "Hierarchical").
      if (by_host(bytes)) return Algo::Hierarchical;
      // Up to a few MiB, halving-doubling's log2(n) steps beat the ring's
      // 2(n-1): at 8 ranks and 1 MiB on 16 cores 0.5 ms against 1.2-1.4
      // (docs/PERFORMANCE.md, "Waiting on 16 cores"), and even or ahead on
      // 2 cores at 3 and 4 ranks up to 4 MiB.
      if (bytes <= kHalvingDoublingMax && ranks > 2) return Algo::HalvingDoubling;
      return Algo::Ring;
    case CollOp::AllGather:
      if (bytes <= 16 * 1024) return Algo::RecursiveDoubling;
      if (by_host(bytes)) return Algo::Hierarchical;
      return Algo::Ring;
    case CollOp::ReduceScatter:
      if (bytes <= 16 * 1024) return Algo::Direct;
      if (by_host(bytes)) return Algo::Hierarchical;
      return Algo::Ring;
    case CollOp::Broadcast:
    case CollOp::Reduce:
      // On ranks numbered host by host the flat chain crosses each link
      // once too (the same time on the bed); by host it does whatever the
      // numbering.
      if (by_host(bytes)) return Algo::Hierarchical;
      if (ranks <= 2) return Algo::Direct;
      if (bytes <= 256 * 1024) return Algo::Tree;
      return Algo::Ring;
    case CollOp::Barrier: return Algo::Dissemination;
    default: return Algo::Direct;
  }
}

Algo AlgoSelector::choose(CollOp op, std::size_t bytes, int ranks) const {
  if (ranks == 1) return Algo::Local;
  const Algo forced = forced_[static_cast<std::size_t>(op)];
  return forced != Algo::None ? forced : table(op, bytes, ranks);
}

std::string AlgoSelector::explain(CollOp op, std::size_t bytes, int ranks) const {
  const Algo algo = choose(op, bytes, ranks);
  if (ranks == 1) return "local: a single rank";
  if (forced_[static_cast<std::size_t>(op)] != Algo::None) {
    return std::string(to_string(algo)) + ": forced by RDMX_ALGO='" + spec_ + "'";
  }
  return std::string(to_string(algo)) + ": table choice for " + std::to_string(bytes) + " bytes on " +
         std::to_string(ranks) + " ranks (" + std::to_string(hosts_) + (hosts_ == 1 ? " host" : " hosts") +
         (per_host_ > 0 ? " x " + std::to_string(per_host_) : std::string(" of unequal sizes")) +
         (network_ ? ", network links" : "") + ")";
}

}  // namespace rdmx::coll
