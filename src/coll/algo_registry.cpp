// SPDX-License-Identifier: MIT
#include "coll/algo_registry.hpp"

#include "coll/algorithms.hpp"
#include "rdmx/error.hpp"

namespace rdmx::coll {
namespace {

// The hierarchical algorithms need every host to have as many ranks. On
// one host, or one rank per host, they are the flat ring: selection weighs
// them only where there are hosts of several ranks; RDMX_ALGO may still
// force them there.
const char* hier_refuses(const Placement& p, bool forced) {
  if (p.per_host == 0) return "the hosts of this communicator have unequal rank counts";
  if (!forced && (p.hosts <= 1 || p.per_host <= 1)) return "one host, or one rank per host: the flat ring";
  return nullptr;
}

const std::vector<AlgoRow>& rows() {
  static const std::vector<AlgoRow> table{
      {.algo = Algo::Ring,
       .name = "ring",
       .aliases = {},
       .builds = {{CollOp::AllReduce, all_reduce_ring},
                  {CollOp::AllGather, all_gather_ring},
                  {CollOp::ReduceScatter, reduce_scatter_ring},
                  {CollOp::Broadcast, broadcast_ring},
                  {CollOp::Reduce, reduce_ring}},
       .cost = ring_cost},
      {.algo = Algo::RecursiveDoubling,
       .name = "rd",
       .aliases = {"recursive_doubling"},
       .builds = {{CollOp::AllReduce, all_reduce_rd}, {CollOp::AllGather, all_gather_rd}},
       .cost = rd_cost},
      {.algo = Algo::HalvingDoubling,
       .name = "hd",
       .aliases = {"halving_doubling"},
       .builds = {{CollOp::AllReduce, all_reduce_hd}, {CollOp::ReduceScatter, reduce_scatter_hd}},
       .cost = hd_cost},
      {.algo = Algo::Tree,
       .name = "tree",
       .aliases = {},
       .builds = {{CollOp::AllReduce, all_reduce_tree},
                  {CollOp::Broadcast, broadcast_tree},
                  {CollOp::Reduce, reduce_tree}},
       .cost = tree_cost},
      {.algo = Algo::Dissemination,
       .name = "dissemination",
       .aliases = {},
       .builds = {{CollOp::Barrier, barrier}},
       .cost = dissemination_cost},
      {.algo = Algo::Direct,
       .name = "direct",
       .aliases = {},
       .builds = {{CollOp::AllReduce, all_reduce_direct},
                  {CollOp::AllGather, all_gather_direct},
                  {CollOp::ReduceScatter, reduce_scatter_direct},
                  {CollOp::Broadcast, broadcast_direct},
                  {CollOp::Reduce, reduce_direct},
                  {CollOp::AllToAll, all_to_all},
                  {CollOp::AllToAllv, all_to_all},
                  {CollOp::Gather, gather},
                  {CollOp::Scatter, scatter},
                  {CollOp::Barrier, barrier}},
       .cost = direct_cost},
      {.algo = Algo::Hierarchical,
       .name = "hier",
       .aliases = {"hierarchical"},
       .builds = {{CollOp::AllReduce, all_reduce_hier},
                  {CollOp::AllGather, all_gather_hier},
                  {CollOp::ReduceScatter, reduce_scatter_hier},
                  {CollOp::Broadcast, broadcast_hier},
                  {CollOp::Reduce, reduce_hier}},
       .refuses_fn = hier_refuses,
       .cost = hier_cost},
  };
  return table;
}

}  // namespace

BuildFn AlgoRow::build(CollOp op) const {
  for (const auto& [o, fn] : builds) {
    if (o == op) return fn;
  }
  return nullptr;
}

const std::vector<AlgoRow>& algo_rows() { return rows(); }

const AlgoRow* find_algo(Algo algo) {
  for (const AlgoRow& row : rows()) {
    if (row.algo == algo) return &row;
  }
  return nullptr;
}

const AlgoRow* find_algo(const std::string& name) {
  for (const AlgoRow& row : rows()) {
    if (name == row.name) return &row;
    for (const std::string& alias : row.aliases) {
      if (name == alias) return &row;
    }
  }
  return nullptr;
}

BuildFn build_of(const OpDesc& desc) {
  const AlgoRow* row = find_algo(desc.algo);
  const BuildFn fn = row != nullptr ? row->build(desc.op) : nullptr;
  if (fn == nullptr) {
    throw Error(ErrorCode::InvalidState, "no schedule for " + describe(desc),
                {.op = describe(desc), .hint = "selection chose an algorithm whose registry row lacks the operation"});
  }
  return fn;
}

std::string algo_names() {
  std::string out;
  for (const AlgoRow& row : rows()) out += (out.empty() ? "" : ", ") + std::string(row.name);
  return out;
}

std::string algo_names(CollOp op) {
  std::string out;
  for (const AlgoRow& row : rows()) {
    if (row.implements(op)) out += (out.empty() ? "" : ", ") + std::string(row.name);
  }
  return out;
}

}  // namespace rdmx::coll
