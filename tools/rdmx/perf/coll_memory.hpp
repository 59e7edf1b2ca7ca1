// SPDX-License-Identifier: MIT
// Whether this host's memory can hold N local ranks running collectives, for
// `rdmx perf coll --np N` and `rdmx perf scale --np N` before they start any
// rank; `command` names the one asking.
#pragma once

#include <cstddef>

namespace rdmx::cli {

// Throws Error(InvalidArgument), with the numbers and what would fit, when
// `ranks` local ranks, each with the collectives' buffers for `peers` peers
// or the peers rdmx::comm_memory expects, whichever is more (-1: every
// other rank, as an all_to_all connects them) and `test_bytes` of test buffers, would not fit in what the
// host can give; does nothing when that is unknown or RDMX_COLL_MEMORY=off.
void refuse_local_ranks_beyond_memory(int ranks, int peers, std::size_t test_bytes, const char* command);

}  // namespace rdmx::cli
