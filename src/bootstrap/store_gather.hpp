// SPDX-License-Identifier: MIT
// What every rank of a communicator publishes, read by all of them through
// the store without N x N requests: each rank sets "<key>/<r>" with its own
// value and those of the ranks below it in a tree of fan-in 16 (it waits for
// its children's with one request), rank 0 publishes the whole as "<key>",
// and every rank reads that one value. Each rank then removes its own key,
// and the last to read "<key>" removes it. No rank makes more than about 20
// requests, and the store serves about 4 per rank.
#pragma once

#include <string>
#include <vector>

#include "rdmx/bootstrap.hpp"
#include "services/wait.hpp"

namespace rdmx::bootstrap {

// Returns every rank's `mine`, indexed by rank. `what` names the values and
// `op` the operation in errors ("placement", "communicator create"); waits end
// at `deadline`, and a rank that never publishes is named.
std::vector<std::string> gather_through_store(Store& store, const std::string& key, int rank, int size,
                                              const std::string& mine, const char* what, const char* op,
                                              core::Clock::time_point deadline);

}  // namespace rdmx::bootstrap
