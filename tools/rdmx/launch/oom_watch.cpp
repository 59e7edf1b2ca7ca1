// SPDX-License-Identifier: MIT
#include "launch/oom_watch.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <optional>

namespace rdmx::cli {
namespace {

long long monotonic_us() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1'000'000 + ts.tv_nsec / 1000;
}

std::optional<unsigned long long> oom_kills(const std::string& file) {
  std::ifstream in(file);
  std::string key;
  unsigned long long value = 0;
  while (in >> key >> value) {
    if (key == "oom_kill") return value;
  }
  return std::nullopt;
}

// The kernel log's record of the OOM killer ending `pid` since `since_us`,
// up to the memory figures: "Memory cgroup out of memory: Killed process 7 (prog)".
std::string kernel_log_kill(pid_t pid, long long since_us) {
  const int fd = ::open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return {};
  const std::string needle = "Killed process " + std::to_string(pid) + " (";
  std::string found;
  char record[8192];
  for (;;) {
    const ssize_t got = ::read(fd, record, sizeof record - 1);
    if (got < 0 && errno == EPIPE) continue;  // a record was overwritten while we read: go on
    if (got <= 0) break;
    record[got] = '\0';
    // "priority,sequence,microseconds,flags;message\n"
    unsigned long long priority = 0, sequence = 0;
    long long stamp = 0;
    int text_at = 0;
    if (std::sscanf(record, "%llu,%llu,%lld,%*[^;];%n", &priority, &sequence, &stamp, &text_at) < 3 || text_at == 0) {
      continue;
    }
    std::string text(record + text_at);
    if (stamp + 1'000'000 < since_us || text.find(needle) == std::string::npos) continue;
    text = text.substr(0, text.find('\n'));
    found = text.substr(0, text.find(" total-vm"));
  }
  ::close(fd);
  return found;
}

}  // namespace

OomWatch::OomWatch() : started_us_(monotonic_us()) {
  std::ifstream cgroups("/proc/self/cgroup");
  for (std::string line; std::getline(cgroups, line);) {
    const std::size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1), path = line.substr(second + 1);
    std::vector<std::string> files;
    if (line.compare(0, first, "0") == 0 && controllers.empty()) {
      for (const char* root : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
        files.push_back(std::string(root) + (path == "/" ? "" : path) + "/memory.events");
      }
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      files.push_back("/sys/fs/cgroup/memory" + (path == "/" ? std::string() : path) + "/memory.oom_control");
    }
    for (const std::string& file : files) {
      if (const auto count = oom_kills(file)) counters_.push_back({file, path, *count});
    }
  }
}

std::string OomWatch::explain_sigkill(pid_t pid) const {
  if (const std::string line = kernel_log_kill(pid, started_us_); !line.empty()) {
    return "likely by the kernel's OOM killer (the kernel log says \"" + line + "\")";
  }
  for (const Counter& c : counters_) {
    const auto now = oom_kills(c.file);
    if (now && *now > c.before) {
      return "likely by the kernel's OOM killer (the oom_kill count of cgroup " + c.cgroup + " rose from " +
             std::to_string(c.before) + " to " + std::to_string(*now) + " while the job ran, " + c.file + ")";
    }
  }
  return {};
}

}  // namespace rdmx::cli
