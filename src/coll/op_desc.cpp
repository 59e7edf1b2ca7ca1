// SPDX-License-Identifier: MIT
#include "coll/op_desc.hpp"

namespace rdmx::coll {

const char* to_string(Algo algo) noexcept {
  switch (algo) {
    case Algo::None: return "none";
    case Algo::Ring: return "ring";
    case Algo::RecursiveDoubling: return "rd";
    case Algo::HalvingDoubling: return "hd";
    case Algo::Tree: return "tree";
    case Algo::Direct: return "direct";
    case Algo::Dissemination: return "dissemination";
    case Algo::Local: return "local";
    case Algo::Hierarchical: return "hier";
  }
  return "?";
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
