// SPDX-License-Identifier: MIT
#include "perf/perf_stats.hpp"

#include <algorithm>
#include <cmath>

namespace rdmx::cli {

LatencyStats summarize(std::vector<double>& samples) {
  std::sort(samples.begin(), samples.end());
  const std::size_t n = samples.size();
  LatencyStats stats;
  stats.min = samples.front();
  stats.max = samples.back();
  stats.typical = samples[n / 2];
  double sum = 0;
  for (double v : samples) sum += v;
  stats.average = sum / static_cast<double>(n);
  double square_sum = 0;
  for (double v : samples) square_sum += (v - stats.average) * (v - stats.average);
  stats.stdev = std::sqrt(square_sum / static_cast<double>(n));
  auto percentile = [&](double fraction) {
    const auto index = static_cast<std::size_t>(std::ceil(fraction * static_cast<double>(n)));
    return samples[std::min(n - 1, index == 0 ? 0 : index - 1)];
  };
  stats.p99 = percentile(0.99);
  stats.p999 = percentile(0.999);
  return stats;
}

double ns_per_tick() {
  static const double rate = [] {
#if defined(__x86_64__)
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    const std::uint64_t c0 = ticks();
    // A 50 ms calibration window: a bounded loop on the clock, run once.
    while (Clock::now() - t0 < std::chrono::milliseconds(50)) {
    }
    const std::uint64_t c1 = ticks();
    return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / static_cast<double>(c1 - c0);
#else
    return 1.0;
#endif
  }();
  return rate;
}

}  // namespace rdmx::cli
