// SPDX-License-Identifier: MIT
// Whether the kernel's OOM killer ended a rank: a rank killed by SIGKILL that
// no one in the job sent it is reported with the likely cause when the
// kernel says so, and as before when it does not.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace rdmx::cli {

class OomWatch {
 public:
  // Notes the time and the oom_kill counters of this process's memory
  // cgroups (the ranks inherit them) before the ranks start.
  OomWatch();
  // For a rank `pid` that SIGKILL ended: "likely by the kernel's OOM killer
  // (...what the kernel says...)", or "" when nothing says so: the kernel
  // log's "Killed process <pid>" since the job started (/dev/kmsg, where
  // readable), else a cgroup's oom_kill count that rose while the job ran.
  std::string explain_sigkill(pid_t pid) const;

 private:
  struct Counter {
    std::string file;  // memory.events (v2) or memory.oom_control (v1)
    std::string cgroup;
    unsigned long long before = 0;
  };
  long long started_us_ = 0;  // CLOCK_MONOTONIC, as the kernel log stamps its records
  std::vector<Counter> counters_;
};

}  // namespace rdmx::cli
