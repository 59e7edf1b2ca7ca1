// SPDX-License-Identifier: MIT
// Which algorithm runs an operation: the one the cost model predicts
// fastest among the registry's rows that implement it and can run on the
// communicator's hosts, unless RDMX_ALGO (or CommOptions::algo) forces one.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "coll/algo_registry.hpp"
#include "coll/cost_model.hpp"
#include "coll/op_desc.hpp"

namespace rdmx::coll {

class AlgoSelector {
 public:
  // `spec`: empty (the model), one algorithm for every operation that has it
  // ("ring"), or per operation ("all_reduce:rd,broadcast:tree"). Throws
  // Config naming the bad entry and what is valid.
  explicit AlgoSelector(const std::string& spec);

  // The communicator's layout: `hosts`, and ranks per host when every host
  // has as many (else 0). Throws Config when RDMX_ALGO forces an algorithm
  // the layout cannot run.
  void set_layout(int hosts, int per_host);
  // The figures the model charges, the same on every rank.
  void set_links(const LinkModel& links);
  const LinkModel& links() const noexcept { return links_; }

  // `bytes`: the size nccl-tests reports for the operation (see algorithms.cpp).
  Algo choose(CollOp op, std::size_t bytes, int ranks) const;
  // Why choose() gives what it gives, with the model's predictions, for
  // INFO logs and `rdmx info`.
  std::string explain(CollOp op, std::size_t bytes, int ranks) const;
  const std::string& spec() const noexcept { return spec_; }

  // The algorithms an operation implements, in the registry's order.
  static std::vector<Algo> supported(CollOp op);

 private:
  Algo modelled(CollOp op, std::size_t bytes, int ranks) const;
  void forget();
  std::string spec_;
  std::array<Algo, 16> forced_{};  // per CollOp; None = the model
  int hosts_ = 1;
  int per_host_ = 0;
  LinkModel links_;
  // Per CollOp, the last size modelled and its choice: bytes << 8 | Algo (0: none).
  mutable std::array<std::atomic<std::uint64_t>, 16> last_{};
};

}  // namespace rdmx::coll
