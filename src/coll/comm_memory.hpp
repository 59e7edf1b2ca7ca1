// SPDX-License-Identifier: MIT
// Whether the collectives' buffers of a communicator fit in the memory of
// the hosts its ranks share (rdmx::CommMemory, docs/COLLECTIVES.md "Memory"):
// what a host can give them (RDMX_COLL_MEMORY), and the check that every
// rank of a communicator makes alike before any of them maps its buffers.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "coll/links.hpp"
#include "coll/rank_placement.hpp"
#include "rdmx/comm.hpp"

namespace rdmx::coll {

struct HostMemory {
  std::size_t bytes = 0;  // 0: unknown, or RDMX_COLL_MEMORY=off
  std::string from;       // "MemAvailable in /proc/meminfo", "RDMX_COLL_MEMORY=2G", ...
};

// What this host can give the buffers now, as RDMX_COLL_MEMORY says: by
// default the least of MemAvailable and the room under each memory limit of
// this process's cgroup and its ancestors. Throws Error(Config) for a
// malformed RDMX_COLL_MEMORY.
HostMemory host_memory();

// The estimate for `ranks` ranks, `local_ranks` on a host that can give `memory`.
CommMemory estimate_comm_memory(int ranks, int local_ranks, const HostMemory& memory);

// Throws Error(Config) when this rank connecting `more` peers beside the
// `connected` it has, with each of the `local_ranks` of its host doing
// alike (an all_to_all's first call), needs more than the host has now.
void require_room_to_connect(int more, int connected, int local_ranks, const LinksConfig& config, int rank,
                             const std::string& op);

// Every rank calls this with everyone's RankWhere, and so decides alike:
// the ranks sharing a machine (boot id) are checked against the figure the
// lowest of them published. Throws as require_comm_memory_fits.
void require_buffers_fit(const std::vector<RankWhere>& everyone, int rank);

}  // namespace rdmx::coll
