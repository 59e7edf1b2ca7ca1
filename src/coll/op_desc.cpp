// SPDX-License-Identifier: MIT
#include "coll/op_desc.hpp"

#include "coll/algo_registry.hpp"

namespace rdmx::coll {

const char* to_string(Algo algo) noexcept {
  if (algo == Algo::None) return "none";
  if (algo == Algo::Local) return "local";
  const AlgoRow* row = find_algo(algo);
  return row != nullptr ? row->name : "?";
}

std::string describe(const OpDesc& desc) {
  std::string out = to_string(desc.op);
  out += " #" + std::to_string(desc.seq);
  if (desc.op == CollOp::Barrier) return out + " (" + to_string(desc.algo) + ")";
  out += " (";
  out += to_string(desc.type);
  if (desc.op != CollOp::AllToAllv) out += " x " + std::to_string(desc.count);
  if (desc.op == CollOp::AllReduce || desc.op == CollOp::ReduceScatter || desc.op == CollOp::Reduce) {
    out += ", ";
    out += to_string(desc.redop);
  }
  if (desc.op == CollOp::Broadcast || desc.op == CollOp::Reduce || desc.op == CollOp::Gather ||
      desc.op == CollOp::Scatter) {
    out += ", root " + std::to_string(desc.root);
  }
  if (desc.p2p()) {
    out += ", peer " + std::to_string(desc.root);
  } else if (desc.algo != Algo::None) {
    out += ", ";
    out += to_string(desc.algo);
  }
  return out + ")";
}

}  // namespace rdmx::coll
