// SPDX-License-Identifier: MIT
// Which ranks share a host, as a communicator learns it at creation from
// each rank's host identity, and the rings the hierarchical algorithms run
// on it: one within each host, and one across the hosts per local index.
#pragma once

#include <string>
#include <vector>

namespace rdmx::coll {

struct HostLayout {
  std::vector<int> host_of;             // per rank: its host, hosts numbered by their lowest rank
  std::vector<int> local_of;            // per rank: its index among its host's ranks
  std::vector<std::vector<int>> ranks;  // per host: its ranks, ascending
  std::vector<std::string> names;       // per host: a name for messages

  int hosts() const noexcept { return static_cast<int>(ranks.size()); }
  // Ranks per host when every host has as many (what the hierarchical
  // algorithms need), else 0.
  int per_host() const noexcept;
  int host(int rank) const { return host_of[static_cast<std::size_t>(rank)]; }
  int local(int rank) const { return local_of[static_cast<std::size_t>(rank)]; }
  // The rank with local index `local` on host `host`.
  int rank_at(int host, int local) const {
    return ranks[static_cast<std::size_t>(host)][static_cast<std::size_t>(local)];
  }
  // "2 hosts x 2 ranks: bed-h0 [0 1], bed-h1 [2 3]".
  std::string describe() const;
  // The rings of the hierarchical algorithms, for INFO logs.
  std::string describe_rings() const;
};

// From every rank's host identity (`identities[r]`, equal for ranks of one
// host) and a display name per rank.
HostLayout make_host_layout(const std::vector<std::string>& identities, const std::vector<std::string>& names);

}  // namespace rdmx::coll
