// SPDX-License-Identifier: MIT
// How a communicator's ranks learn what each of the others says of itself
// (its placement, its link figures): every rank's value, indexed by rank.
// A communicator passes Membership::gather() over its control connections
// (coll/comm_membership.hpp), so no store serves N x N bytes.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "services/wait.hpp"

namespace rdmx::coll {

// `key` names the exchange, the same on every rank; `what` names the values
// in errors.
using GatherAll = std::function<std::vector<std::string>(const std::string& key, const std::string& mine,
                                                         const char* what, core::Clock::time_point deadline)>;

}  // namespace rdmx::coll
