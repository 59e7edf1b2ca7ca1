// SPDX-License-Identifier: MIT
// Which algorithm runs an operation: a table by operation, size and rank
// count, which RDMX_ALGO (or CommOptions::algo) may override.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "coll/op_desc.hpp"

namespace rdmx::coll {

class AlgoSelector {
 public:
  // `spec`: empty (the table), one algorithm for every operation that has it
  // ("ring"), or per operation ("all_reduce:rd,broadcast:tree"). Throws
  // Config naming the bad entry and what is valid.
  explicit AlgoSelector(const std::string& spec);

  // The communicator's layout: `hosts`, and ranks per host when every host
  // has as many (else 0). Throws Config when RDMX_ALGO forces a
  // hierarchical algorithm the layout cannot run.
  void set_layout(int hosts, int per_host);
  // Whether some link of the communicator crosses a network (tcp, verbs:
  // DeviceCaps::remote_peers), where each round costs a network's latency.
  void set_network(bool network) noexcept { network_ = network; }

  // `bytes`: the size nccl-tests reports for the operation (see algorithms.cpp).
  Algo choose(CollOp op, std::size_t bytes, int ranks) const;
  // Why choose() gives what it gives, for INFO logs and `rdmx info`.
  std::string explain(CollOp op, std::size_t bytes, int ranks) const;
  const std::string& spec() const noexcept { return spec_; }

  // The algorithms an operation implements, the first being its default family.
  static const std::vector<Algo>& supported(CollOp op);

 private:
  Algo table(CollOp op, std::size_t bytes, int ranks) const;
  std::size_t recursive_doubling_max(int ranks) const;
  std::string spec_;
  std::array<Algo, 16> forced_{};  // per CollOp; None = the table
  int hosts_ = 1;
  int per_host_ = 0;
  bool network_ = false;
};

}  // namespace rdmx::coll
