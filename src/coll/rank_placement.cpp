// SPDX-License-Identifier: MIT
#include "coll/rank_placement.hpp"

#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <vector>

#include "coll/comm_memory.hpp"
#include "services/config.hpp"

namespace rdmx::coll {
namespace {

// Where this machine has two cores for each rank on it (one for the waiter,
// one for the provider's helper and engine threads), a collective's waiter
// spins this long before it sleeps: waking a sleeper costs more than the
// core it frees. On the 16-core VM a futex wake of an idle vCPU took tens of
// microseconds, and a ring pays it at every step (docs/journal/PERFORMANCE-HISTORY.md,
// "Waiting on 16 cores"). Elsewhere, and whenever RDMX_SPIN_US is set, waits
// spin RDMX_SPIN_US.
constexpr std::chrono::microseconds kDedicatedCoreSpin{20000};

std::string read_boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

// The NUMA node of the CPU this thread runs on now (-1 when unknown).
int current_numa_node() {
  unsigned cpu = 0, node = 0;
  return ::getcpu(&cpu, &node) == 0 ? static_cast<int>(node) : -1;
}

}  // namespace

RankWhere RankWhere::here(const std::optional<std::string>& host_id, std::string device) {
  RankWhere w;
  w.boot_id = read_boot_id();
  w.name = host_name();
  w.identity = host_id.value_or(w.name + "/" + w.boot_id);
  w.device = std::move(device);
  w.numa_node = current_numa_node();
  const HostMemory memory = host_memory();
  w.memory = memory.bytes;
  w.memory_from = memory.from;
  return w;
}

std::string RankWhere::encode() const {
  return identity + "\n" + name + "\n" + boot_id + "\n" + device + "\n" + std::to_string(numa_node) + "\n" +
         std::to_string(memory) + "\n" + memory_from;
}

RankWhere RankWhere::decode(const std::string& text) {
  std::vector<std::string> fields;
  std::size_t start = 0;
  for (std::size_t cut; (cut = text.find('\n', start)) != std::string::npos; start = cut + 1) {
    fields.push_back(text.substr(start, cut - start));
  }
  fields.push_back(text.substr(start));
  fields.resize(7);
  RankWhere w{fields[0], fields[1], fields[2], fields[3]};
  w.numa_node = fields[4].empty() ? -1 : std::atoi(fields[4].c_str());
  w.memory = static_cast<std::size_t>(std::strtoull(fields[5].c_str(), nullptr, 10));
  w.memory_from = fields[6];
  return w;
}

std::string host_name() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

std::size_t online_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return static_cast<std::size_t>(CPU_COUNT(&set));
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<std::size_t>(n) : 1;
}

WaitPolicy wait_policy(int ranks_here, std::size_t cpus) {
  const std::string where = std::to_string(ranks_here) + (ranks_here == 1 ? " rank" : " ranks") +
                            " on this machine's " + std::to_string(cpus) + " cores";
  if (core::env("RDMX_SPIN_US")) return {core::spin_budget(), "RDMX_SPIN_US is set (" + where + ")"};
  if (static_cast<std::size_t>(ranks_here) * 2 <= cpus) {
    return {kDedicatedCoreSpin, where + ": two cores per rank, so waiters spin longer; RDMX_SPIN_US sets it"};
  }
  return {core::spin_budget(), where + ": RDMX_SPIN_US's default (longer where each rank has two cores)"};
}

}  // namespace rdmx::coll
