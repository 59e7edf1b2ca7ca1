// SPDX-License-Identifier: MIT
// Time stamps and latency statistics for `rdmx perf p2p`, with perftest's
// definitions (t_typical is the median; percentiles are nearest-rank).
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

namespace rdmx::cli {

struct LatencyStats {
  double min = 0, max = 0, typical = 0, average = 0, stdev = 0, p99 = 0, p999 = 0;
};

// `samples` in microseconds; sorted in place. Needs at least one sample.
LatencyStats summarize(std::vector<double>& samples);

// Time stamps on a ping-pong's critical path: the TSC where it is a stable
// clock (as perftest's get_cycles), cheaper to read than steady_clock::now()
// (docs/PERFORMANCE.md); converted with a rate measured against steady_clock.
#if defined(__x86_64__)
inline std::uint64_t ticks() { return __builtin_ia32_rdtsc(); }
#else
inline std::uint64_t ticks() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}
#endif
// Calibrated once (50 ms) on first use; call it before timing starts.
double ns_per_tick();

}  // namespace rdmx::cli
