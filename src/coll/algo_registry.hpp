// SPDX-License-Identifier: MIT
// Every collective algorithm as one row: its names, the operations it
// implements (each with the function that builds its schedule), what it
// needs of the communicator, and its cost. Selection, RDMX_ALGO, dispatch,
// `rdmx info` and the public cost model all read these rows; adding an
// algorithm is adding a row (CONTRIBUTING.md, "Add a collective algorithm").
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "coll/cost_model.hpp"
#include "coll/op_desc.hpp"

namespace rdmx::coll {

struct OpContext;
using BuildFn = void (*)(OpContext&);

// Where a communicator's ranks run.
struct Placement {
  int ranks = 1;
  int hosts = 1;
  int per_host = 1;  // 0: hosts of unequal rank counts
};

struct AlgoRow {
  Algo algo;
  const char* name;                                // what RDMX_ALGO, explain() and `rdmx info` say
  std::vector<std::string> aliases;                // other names RDMX_ALGO takes
  std::vector<std::pair<CollOp, BuildFn>> builds;  // the operations it implements
  // Why it cannot run on `placement` (nullptr: it can). `forced`: RDMX_ALGO
  // asks for it; otherwise selection only weighs it where it differs from
  // the flat algorithms.
  const char* (*refuses_fn)(const Placement& placement, bool forced) = nullptr;
  double (*cost)(CollOp op, const CostTerms& terms);

  bool implements(CollOp op) const { return build(op) != nullptr; }
  BuildFn build(CollOp op) const;
  const char* refuses(const Placement& placement, bool forced) const {
    return refuses_fn ? refuses_fn(placement, forced) : nullptr;
  }
};

// In selection's order: of equal predictions, the first row's wins.
const std::vector<AlgoRow>& algo_rows();
const AlgoRow* find_algo(Algo algo);
// By name or alias; nullptr for none.
const AlgoRow* find_algo(const std::string& name);
// The schedule builder of `desc`'s algorithm for its operation (chosen and
// checked before: Internal error if the row lacks it).
BuildFn build_of(const OpDesc& desc);
// "ring, rd, hd, ...": every row's name, or those implementing `op`.
std::string algo_names();
std::string algo_names(CollOp op);

}  // namespace rdmx::coll
