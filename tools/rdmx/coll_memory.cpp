// SPDX-License-Identifier: MIT
// Local ranks share this host's memory. Every rank's communicator holds, for
// every rank of the job, an inbox and a staging area of RDMX_COLL_BUFFSIZE
// (src/coll/links.cpp, Layout), so n ranks need about n * n * 2 * BUFFSIZE:
// 256 ranks at the default 4 MiB ask for 512 GiB, and the OOM killer would
// end ranks one by one. Refused before any rank starts, with the numbers.
#include "coll_memory.hpp"

#include <cmath>
#include <cstdio>
#include <vector>

#include "perf_common.hpp"
#include "rdmx/error.hpp"
#include "rdmx/info.hpp"

namespace rdmx::cli {
namespace {

constexpr std::size_t kDefaultBuffsize = std::size_t{4} << 20;
// The process itself (code, stacks, the providers' rings), twice what a rank
// of all_reduce at RDMX_COLL_BUFFSIZE=64K was seen to keep resident (docs/PERFORMANCE.md).
constexpr double kPerProcess = 16.0 * (1 << 20);
// Below this a collective moves large messages in slivers; not worth suggesting.
constexpr std::size_t kSmallestSuggestedBuffsize = std::size_t{64} << 10;

double mem_available_bytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return 0;
  char line[256];
  double kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "MemAvailable: %lf kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib * 1024.0;
}

// RDMX_COLL_BUFFSIZE as the library reads it (rdmx info's value, "4M" or "4M (ignored ...)").
std::size_t coll_buffsize() {
  for (const Setting& s : settings()) {
    if (s.name != "RDMX_COLL_BUFFSIZE") continue;
    try {
      return parse_size(s.value.substr(0, s.value.find(' ')), "RDMX_COLL_BUFFSIZE");
    } catch (const UsageError&) {
    }
  }
  return kDefaultBuffsize;
}

}  // namespace

double coll_buffer_bytes_per_rank(int ranks, std::size_t buffsize) {
  return static_cast<double>(ranks) * 2.0 * static_cast<double>(buffsize);
}

std::string human_size(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 5) {
    bytes /= 1024;
    ++unit;
  }
  // One decimal only where it says something: "4 MiB", "2.5 GiB", "23 GiB".
  const bool decimal = unit > 0 && bytes < 10 && std::fabs(bytes - std::round(bytes)) >= 0.05;
  char text[32];
  std::snprintf(text, sizeof text, decimal ? "%.1f %s" : "%.0f %s", bytes, kUnits[unit]);
  return text;
}

void refuse_local_ranks_beyond_memory(int ranks, std::size_t test_bytes) {
  const double available = mem_available_bytes();
  if (available <= 0) return;  // nothing to compare with
  const std::size_t buffsize = coll_buffsize();
  const double tests = static_cast<double>(test_bytes);
  auto need = [&](int n, std::size_t b) { return n * (coll_buffer_bytes_per_rank(n, b) + tests + kPerProcess); };
  if (need(ranks, buffsize) <= available) return;

  int fit = 0;
  while (fit + 1 < ranks && need(fit + 1, buffsize) <= available) ++fit;
  std::string hint = fit >= 2 ? "use fewer ranks: --np " + std::to_string(fit) + " fits"
                              : "use fewer ranks, or a host with more memory";
  // The buffer size at which these ranks would fit, if it is still a sensible one.
  const double room = available / ranks - tests - kPerProcess;
  if (room > 0) {
    std::size_t suggestion = kSmallestSuggestedBuffsize;
    while (suggestion * 2 <= buffsize / 2 && need(ranks, suggestion * 2) <= available) suggestion *= 2;
    if (suggestion < buffsize && need(ranks, suggestion) <= available) {
      hint += "; or lower RDMX_COLL_BUFFSIZE, e.g. RDMX_COLL_BUFFSIZE=" + std::to_string(suggestion >> 10) +
              "K (large collectives then move in smaller pieces)";
    }
  }
  throw Error(ErrorCode::InvalidArgument,
              "--np " + std::to_string(ranks) + ": " + std::to_string(ranks) + " local ranks need about " +
                  human_size(need(ranks, buffsize)) + " of memory and this host has " + human_size(available) +
                  " available (MemAvailable in /proc/meminfo): each rank holds an inbox and a staging area of "
                  "RDMX_COLL_BUFFSIZE=" +
                  human_size(static_cast<double>(buffsize)) + " for each of the " + std::to_string(ranks) + " ranks (" +
                  human_size(coll_buffer_bytes_per_rank(ranks, buffsize)) + " per rank), plus " + human_size(tests) +
                  " of test buffers and about " + human_size(kPerProcess) + " for the process",
              {.op = "perf coll", .hint = hint});
}

}  // namespace rdmx::cli
