// SPDX-License-Identifier: MIT
// Whether this host's memory can hold N local ranks running collectives, for
// `rdmx perf coll --np N` before it starts any rank.
#pragma once

#include <cstddef>
#include <string>

namespace rdmx::cli {

// Throws Error(InvalidArgument), with the numbers and what would fit, when
// `ranks` local ranks with `test_bytes` of buffers each would not fit in
// MemAvailable; does nothing when /proc/meminfo cannot be read.
void refuse_local_ranks_beyond_memory(int ranks, std::size_t test_bytes);

// Bytes the collectives' buffers take in each of `ranks` ranks, at `buffsize`
// (RDMX_COLL_BUFFSIZE) per peer: an inbox and a staging area per rank.
double coll_buffer_bytes_per_rank(int ranks, std::size_t buffsize);

// "4.0 GiB", "512 MiB": binary units, for messages.
std::string human_size(double bytes);

}  // namespace rdmx::cli
