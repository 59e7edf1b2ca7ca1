// SPDX-License-Identifier: MIT
#include "coll/selection.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "rdmx/error.hpp"

namespace rdmx::coll {
namespace {

constexpr CollOp kOps[] = {CollOp::AllReduce, CollOp::AllGather, CollOp::ReduceScatter, CollOp::Broadcast,
                           CollOp::Reduce,    CollOp::AllToAll,  CollOp::AllToAllv,     CollOp::Gather,
                           CollOp::Scatter,   CollOp::Barrier};

std::string op_names() {
  std::string out;
  for (CollOp op : kOps) out += (out.empty() ? "" : ", ") + std::string(to_string(op));
  return out;
}

std::string link_text(const LinkCost& link) {
  char text[64];
  std::snprintf(text, sizeof text, "%.3g us/%.3g GB/s", link.latency_us, link.bandwidth_gbps);
  return text;
}

}  // namespace

std::vector<Algo> AlgoSelector::supported(CollOp op) {
  std::vector<Algo> out;
  for (const AlgoRow& row : algo_rows()) {
    if (row.implements(op)) out.push_back(row.algo);
  }
  return out;
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
    const AlgoRow* row = find_algo(name);
    if (row == nullptr) {
      throw Error(
          ErrorCode::Config, "RDMX_ALGO: unknown algorithm '" + name + "' in '" + spec + "'",
          {.op = "algorithm selection",
           .hint = "use " + algo_names() + ", for every operation or per operation as all_reduce:rd,broadcast:tree"});
    }
    if (colon == std::string::npos) {
      for (CollOp op : kOps) {
        if (row->implements(op)) forced_[static_cast<std::size_t>(op)] = row->algo;
      }
      continue;
    }
    const std::string op_name = item.substr(0, colon);
    bool found = false;
    for (CollOp op : kOps) {
      if (op_name != to_string(op)) continue;
      found = true;
      if (!row->implements(op)) {
        throw Error(ErrorCode::Config, "RDMX_ALGO: " + op_name + " has no algorithm '" + name + "'",
                    {.op = "algorithm selection", .hint = op_name + " implements: " + algo_names(op)});
      }
      forced_[static_cast<std::size_t>(op)] = row->algo;
    }
    if (!found) {
      throw Error(ErrorCode::Config, "RDMX_ALGO: unknown operation '" + op_name + "' in '" + spec + "'",
                  {.op = "algorithm selection", .hint = "operations: " + op_names()});
    }
  }
}

void AlgoSelector::forget() {
  for (auto& last : last_) last.store(0, std::memory_order_relaxed);
}

void AlgoSelector::set_links(const LinkModel& links) {
  links_ = links;
  forget();
}

void AlgoSelector::set_layout(int hosts, int per_host) {
  forget();
  hosts_ = hosts;
  per_host_ = per_host;
  const Placement placement{.ranks = hosts * per_host, .hosts = hosts, .per_host = per_host};
  for (CollOp op : kOps) {
    const Algo forced = forced_[static_cast<std::size_t>(op)];
    if (forced == Algo::None) continue;
    const char* why = find_algo(forced)->refuses(placement, true);
    if (why == nullptr) continue;
    throw Error(ErrorCode::Config,
                std::string("RDMX_ALGO forces ") + to_string(forced) + " for " + to_string(op) + " ('" + spec_ +
                    "'), but " + why,
                {.op = "algorithm selection",
                 .hint = "start as many ranks on every host, or leave " + std::string(to_string(forced)) +
                         " out of RDMX_ALGO (RDMX_DEBUG=INFO logs the topology)"});
  }
}

// What predict_collective() chooses, without building its list: this runs
// for every call. The last answer per operation is kept, since a loop
// calls one operation at one size over and over.
Algo AlgoSelector::modelled(CollOp op, std::size_t bytes, int ranks) const {
  auto& last = last_[static_cast<std::size_t>(op)];
  const std::uint64_t seen = last.load(std::memory_order_relaxed);
  if (seen != 0 && seen >> 8 == bytes) return static_cast<Algo>(seen & 0xff);
  const int hosts = std::min(hosts_, ranks);
  const CostTerms terms = cost_terms(cost_query(op, static_cast<double>(bytes), ranks, hosts, per_host_, links_));
  const Placement placement{.ranks = ranks, .hosts = hosts, .per_host = per_host_};
  Algo best = Algo::None;
  double best_seconds = 0;
  for (const AlgoRow& row : algo_rows()) {
    if (!row.implements(op) || row.refuses(placement, false) != nullptr) continue;
    const double seconds = row.cost(op, terms);
    if (best == Algo::None || seconds < best_seconds * (1 - 1e-9)) {
      best = row.algo;
      best_seconds = seconds;
    }
  }
  if (best == Algo::None) best = Algo::Direct;
  if (bytes < (std::uint64_t{1} << 56)) last.store(std::uint64_t{bytes} << 8 | static_cast<std::uint8_t>(best));
  return best;
}

Algo AlgoSelector::choose(CollOp op, std::size_t bytes, int ranks) const {
  if (ranks == 1) return Algo::Local;
  const Algo forced = forced_[static_cast<std::size_t>(op)];
  return forced != Algo::None ? forced : modelled(op, bytes, ranks);
}

std::string AlgoSelector::explain(CollOp op, std::size_t bytes, int ranks) const {
  if (ranks == 1) return "local: a single rank";
  const Algo algo = choose(op, bytes, ranks);
  if (forced_[static_cast<std::size_t>(op)] != Algo::None) {
    return std::string(to_string(algo)) + ": forced by RDMX_ALGO='" + spec_ + "'";
  }
  CostPrediction prediction =
      predict_collective(cost_query(op, static_cast<double>(bytes), ranks, std::min(hosts_, ranks), per_host_, links_));
  std::stable_sort(prediction.algorithms.begin(), prediction.algorithms.end(),
                   [](const AlgoCost& a, const AlgoCost& b) { return a.seconds < b.seconds; });
  std::string list;
  for (const AlgoCost& a : prediction.algorithms) {
    list += (list.empty() ? "" : ", ") + a.algo + " " + format_seconds(a.seconds);
  }
  std::string out = std::string(to_string(algo)) + ": lowest predicted (" + list + ") for " + std::to_string(bytes) +
                    " bytes on " + std::to_string(ranks) + " ranks (" + std::to_string(hosts_) +
                    (hosts_ == 1 ? " host" : " hosts") +
                    (per_host_ > 0 ? " x " + std::to_string(per_host_) : std::string(" of unequal sizes")) +
                    "); links: in-host " + link_text(links_.in_host);
  if (hosts_ > 1) out += ", between hosts " + link_text(links_.between_hosts);
  char reduce[48];
  std::snprintf(reduce, sizeof reduce, ", reduction %.3g GB/s", links_.reduce_gbps);
  return out + reduce + " (" + links_.basis + ")";
}

}  // namespace rdmx::coll
