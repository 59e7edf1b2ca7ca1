// SPDX-License-Identifier: MIT
// rdmx perf gpu-copy: the GPU's own device-to-device copy rate, the roofline
// for perf p2p and perf coll on device buffers of one GPU. One process: per
// size, `iters` cuMemcpyAsync calls queued back to back on a stream of its
// own, timed by the host clock from the first call to cuStreamSynchronize's
// return (so the figure includes one launch latency, as a collective's
// does). GB = 1e9 bytes, each byte counted once although the copy reads and
// writes it. Each size's last copy is checked: the source holds a byte value
// of its own, and the first and last byte of the destination must have it.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "perf/gpu.hpp"
#include "rdmx/bootstrap.hpp"

namespace rdmx::cli {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr double kTargetSeconds = 0.2;  // as perf coll's calibration
constexpr long kMinIters = 5;
constexpr long kMaxIters = 10000;
constexpr int kCalibrationIters = 3;

struct CopyOptions {
  std::string min_bytes = "8";
  std::string max_bytes = "64M";
  std::string sizes;
  long iters = 0;  // 0: per size, kTargetSeconds worth
  long warmup = 5;
  int gpu = -1;
  bool json = false;
  std::string json_lines;
};

std::vector<std::size_t> copy_sizes(const CopyOptions& o) {
  if (!o.sizes.empty()) return parse_size_list(o.sizes, "--sizes");
  const std::size_t low = parse_size(o.min_bytes, "-b");
  const std::size_t high = parse_size(o.max_bytes, "-e");
  if (low == 0 || high < low) throw UsageError{"-b " + o.min_bytes + " -e " + o.max_bytes + ": an empty range"};
  return powers_of_two(low, high);
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Seconds for `iters` copies, from the first queued to the stream drained.
double time_copies(gpu::Gpu& gpu, void* dst, const void* src, std::size_t bytes, long iters, void* stream) {
  const auto start = Clock::now();
  for (long i = 0; i < iters; ++i) gpu.copy_async(dst, src, bytes, stream);
  gpu.synchronize(stream);
  return seconds_since(start);
}

std::string format_number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, value < 10 ? "%.3f" : value < 100 ? "%.2f" : value < 1e4 ? "%.1f" : "%.0f", value);
  return text;
}

void run_copies(const CopyOptions& o, const std::vector<std::size_t>& sizes) {
  const LaunchInfo launch = launcher_present() ? detect_launch() : LaunchInfo{};
  gpu::Gpu& gpu = gpu::Gpu::open(o.gpu, launch.local_rank >= 0 ? launch.local_rank : 0, "perf gpu-copy");
  const std::size_t largest = *std::max_element(sizes.begin(), sizes.end());
  gpu::DeviceBuffer src(gpu, largest);
  gpu::DeviceBuffer dst(gpu, largest);
  void* stream = gpu.create_stream();
  struct StreamGuard {
    gpu::Gpu& gpu;
    void* stream;
    ~StreamGuard() { gpu.destroy_stream(stream); }
  } guard{gpu, stream};

  JsonLines lines(o.json_lines, "--json-lines");
  if (!o.json) {
    std::printf("# rdmx perf gpu-copy: GPU %d (%s), cuMemcpyAsync device to device on a stream of its own\n",
                gpu.ordinal(), gpu.name().c_str());
    if (o.iters > 0) {
      std::printf("# iters %ld", o.iters);
    } else {
      std::printf("# iters: per size, %.1f s worth (%ld..%ld)", kTargetSeconds, kMinIters, kMaxIters);
    }
    std::printf(
        ", warmup %ld; time = per copy, host clock from the first copy queued to cuStreamSynchronize's return\n"
        "# GB = 1e9 B, bytes counted once (each is read once and written once: the GPU's memory moves twice "
        "this)\n#\n",
        o.warmup);
    std::printf("# %10s  %8s  %10s  %9s  %5s\n", "size", "iters", "time", "bw", "check");
    std::printf("# %10s  %8s  %10s  %9s  %5s\n", "(B)", "", "(us)", "(GB/s)", "");
    std::fflush(stdout);
  }
  json results = json::array();
  int wrong = 0;
  for (std::size_t index = 0; index < sizes.size(); ++index) {
    const std::size_t bytes = sizes[index];
    const auto value = static_cast<std::uint8_t>(index % 250 + 1);
    gpu.set(src.get(), value, bytes);
    gpu.set(dst.get(), 0, bytes);
    if (o.warmup > 0) time_copies(gpu, dst.get(), src.get(), bytes, o.warmup, stream);
    long iters = o.iters;
    if (iters == 0) {
      const double per_copy =
          time_copies(gpu, dst.get(), src.get(), bytes, kCalibrationIters, stream) / kCalibrationIters;
      const double want = per_copy > 0 ? std::ceil(kTargetSeconds / per_copy) : static_cast<double>(kMaxIters);
      iters = static_cast<long>(std::clamp(want, static_cast<double>(kMinIters), static_cast<double>(kMaxIters)));
    }
    const double seconds = time_copies(gpu, dst.get(), src.get(), bytes, iters, stream) / static_cast<double>(iters);
    std::uint8_t ends[2] = {0, 0};
    gpu.copy(&ends[0], dst.get(), 1);
    gpu.copy(&ends[1], dst.get() + bytes - 1, 1);
    const bool ok = ends[0] == value && ends[1] == value;
    wrong += ok ? 0 : 1;
    const double us = seconds * 1e6;
    const double bw = seconds > 0 ? static_cast<double>(bytes) / 1e9 / seconds : 0;
    if (!o.json) {
      std::printf("  %10zu  %8ld  %10s  %9s  %5s\n", bytes, iters, format_number(us).c_str(), format_number(bw).c_str(),
                  ok ? "OK" : "WRONG");
      std::fflush(stdout);
    }
    json row = {{"bytes", bytes}, {"iters", iters}, {"time_us", us}, {"bw_GBps", bw}, {"check", ok}};
    json line = row;
    line["bench"] = "gpu-copy";
    line["gpu"] = gpu.ordinal();
    lines.write(line);
    results.push_back(std::move(row));
  }
  if (o.json) {
    const json document = {{"schema", "rdmx.perf.gpu_copy/1"},
                           {"gpu", gpu.ordinal()},
                           {"gpu_name", gpu.name()},
                           {"copy", "cuMemcpyAsync device to device, bytes counted once, GB = 1e9 B"},
                           {"results", std::move(results)}};
    std::printf("%s\n", document.dump(2).c_str());
  }
  if (wrong > 0) {
    std::fprintf(stderr, "rdmx perf gpu-copy: %d sizes copied wrong bytes (first or last byte of the destination)\n",
                 wrong);
    throw ExitStatus{kExitWrong};
  }
}

}  // namespace

void register_perf_gpu_copy(CLI::App& perf) {
  auto* cmd = perf.add_subcommand(
      "gpu-copy",
      "the GPU's own device-to-device copy rate (cuMemcpyAsync), the roofline for perf p2p and perf coll with "
      "--memory cuda; one process, no ranks");
  auto o = std::make_shared<CopyOptions>();
  cmd->add_option("-b,--minbytes", o->min_bytes, "smallest size (default 8)");
  cmd->add_option("-e,--maxbytes", o->max_bytes, "largest size (default 64M); sizes double from -b");
  cmd->add_option("--sizes", o->sizes, "explicit sizes instead of -b/-e: 4,4K,1M or 4K..16M");
  cmd->add_option("-n,--iters", o->iters, "timed copies per size (default: 0.2 s worth, 5..10000)")
      ->check(CLI::Range(1L, 100000000L));
  cmd->add_option("-w,--warmup_iters", o->warmup, "untimed copies per size (default 5)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--gpu", o->gpu, "the GPU (default: the local rank under a launcher, else 0)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--json", o->json, "print one JSON document instead of the table");
  cmd->add_option("--json-lines", o->json_lines, "also append one JSON object per row to this file");
  cmd->callback([o] {
    std::vector<std::size_t> sizes;
    try {
      sizes = copy_sizes(*o);
    } catch (const UsageError& e) {
      throw CLI::ValidationError("perf gpu-copy", e.message);
    }
    run_copies(*o, sizes);
  });
}

}  // namespace rdmx::cli
