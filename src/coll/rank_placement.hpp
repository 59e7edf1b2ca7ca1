// SPDX-License-Identifier: MIT
// Where a communicator's ranks run, as each tells the others at creation,
// and how a rank's collectives wait given how many ranks share its
// machine's cores.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

namespace rdmx::coll {

// What a rank tells the others of where it runs, one line per field.
struct RankWhere {
  std::string identity;  // host identity (RDMX_HOSTID, or host name / boot id)
  std::string name;      // host name
  std::string boot_id;   // ranks with the same one share the machine's cores
  std::string device;    // Device::name(): provider, interface, address
  int numa_node = -1;    // of the CPU the rank ran on at creation
  // What its machine could give the collectives' buffers when it looked,
  // before any rank mapped them (comm_memory.hpp); 0: unknown or unchecked.
  std::size_t memory = 0;
  std::string memory_from;

  // This process: `host_id` is RDMX_HOSTID's value when set.
  static RankWhere here(const std::optional<std::string>& host_id, std::string device);
  std::string encode() const;
  // Missing fields stay empty (numa_node -1).
  static RankWhere decode(const std::string& text);
};

std::string host_name();
// The CPUs this process may run on.
std::size_t online_cpus();

// How long a collective's waiter spins before it sleeps, and why (rdmx info).
struct WaitPolicy {
  std::chrono::microseconds spin;
  std::string why;
};
WaitPolicy wait_policy(int ranks_here, std::size_t cpus);

}  // namespace rdmx::coll
