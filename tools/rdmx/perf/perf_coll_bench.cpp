// SPDX-License-Identifier: MIT
// One sweep of rdmx perf coll: calibration, warm-up, timed calls and the
// check of every row, printed as nccl-tests prints them.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "perf/coll_memory.hpp"
#include "perf/perf_coll.hpp"

namespace rdmx::cli::perf_coll {
namespace {

constexpr double kTargetSeconds = 0.2;
constexpr long kMinIters = 5;
constexpr long kMaxIters = 10000;
constexpr int kCalibrationWarmup = 5;
// Before a sweep, as nccl-tests: -w calls (default 5) at the largest and the
// smallest size, and at the largest at least enough calls to move this much
// per rank (at most kMaxSweepWarmup calls), so that the collectives' rings
// have been cycled through before any row is timed.
constexpr long kSweepWarmupCalls = 5;
constexpr double kSweepWarmupBytes = 64.0 * (1 << 20);
constexpr long kMaxSweepWarmup = 200;
constexpr int kCalibrationIters = 3;

}  // namespace

void Bench::placement(const Buffers& b, const Layout& l, bool inplace, unsigned char*& in, unsigned char*& out) const {
  const std::size_t block = l.count * kTypeSizes[o_.type];
  in = b.send;
  out = b.recv;
  if (!inplace) return;
  in = b.recv;
  switch (o_.op) {
    case Op::AllGather:
    case Op::Gather: in = b.recv + static_cast<std::size_t>(rank_) * block; break;
    case Op::Scatter: out = b.recv + static_cast<std::size_t>(rank_) * block; break;
    case Op::ReduceScatter: out = b.recv + static_cast<std::size_t>(rank_) * block; break;
    default: break;
  }
}

void Bench::run_once(const Layout& l, bool inplace) {
  unsigned char *in = nullptr, *out = nullptr;
  placement(b_, l, inplace, in, out);
  const rdmx::DataType type = kTypes[o_.type];
  const rdmx::ReduceOp redop = kRedops[o_.redop];
  switch (o_.op) {
    case Op::AllReduce: comm_.all_reduce(in, out, l.count, type, redop); break;
    case Op::AllGather: comm_.all_gather(in, out, l.count, type); break;
    case Op::ReduceScatter: comm_.reduce_scatter(in, out, l.count, type, redop); break;
    case Op::Broadcast: comm_.broadcast(out, l.count, type, o_.root); break;
    case Op::Reduce: comm_.reduce(in, out, l.count, type, redop, o_.root); break;
    case Op::AllToAll: comm_.all_to_all(in, out, l.count, type); break;
    case Op::Gather: comm_.gather(in, out, l.count, type, o_.root); break;
    case Op::Scatter: comm_.scatter(in, out, l.count, type, o_.root); break;
    case Op::Barrier: comm_.barrier(); break;
  }
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Seconds per call on this rank, averaged over the ranks.
double Bench::time_calls(const Layout& l, bool inplace, long iters) {
  comm_.barrier();
  const double start = now_s();
  for (long i = 0; i < iters; ++i) run_once(l, inplace);
  const double mine = (now_s() - start) / static_cast<double>(iters);
  double sum = 0;
  comm_.all_reduce(&mine, &sum, 1, rdmx::DataType::Float64, rdmx::ReduceOp::Sum);
  return sum / n_;
}

// Iterations for a size: --iters, or enough for kTargetSeconds by rank 0's calibration.
long Bench::iterations_for(const Layout& l, bool inplace) {
  if (o_.iters > 0) return o_.iters;
  for (int i = 0; i < kCalibrationWarmup; ++i) run_once(l, inplace);
  comm_.barrier();
  const double start = now_s();
  for (int i = 0; i < kCalibrationIters; ++i) run_once(l, inplace);
  const double per_call = (now_s() - start) / kCalibrationIters;
  std::int64_t iters = 0;
  if (rank_ == 0) {
    const double want = per_call > 0 ? std::ceil(kTargetSeconds / per_call) : static_cast<double>(kMaxIters);
    iters = want < kMinIters ? kMinIters : want > kMaxIters ? kMaxIters : static_cast<std::int64_t>(want);
  }
  comm_.broadcast(&iters, 1, rdmx::DataType::Int64, 0);
  return static_cast<long>(iters);
}

// Returns the time of this communicator's first call of the operation (the
// largest size, the first mode the operation has), averaged over the ranks.
double Bench::warm_up_sweep(const std::vector<std::size_t>& sizes, std::size_t esize) {
  const Layout large = layout_for(o_.op, *std::max_element(sizes.begin(), sizes.end()), esize, n_);
  const Layout small = layout_for(o_.op, *std::min_element(sizes.begin(), sizes.end()), esize, n_);
  const bool inplace = !has_mode(o_.op, false);
  const long calls = o_.warmup >= 0 ? o_.warmup : kSweepWarmupCalls;
  const long large_calls =
      large.bytes == 0
          ? calls
          : std::max(calls, std::min(kMaxSweepWarmup, static_cast<long>(std::ceil(kSweepWarmupBytes /
                                                                                  static_cast<double>(large.bytes)))));
  comm_.barrier();
  const double start = now_s();
  run_once(large, inplace);
  const double mine = now_s() - start;
  for (long i = 1; i < large_calls; ++i) run_once(large, inplace);
  if (small.count > 0 || o_.op == Op::Barrier) {
    for (long i = 0; i < calls; ++i) run_once(small, inplace);
  }
  double sum = 0;
  comm_.all_reduce(&mine, &sum, 1, rdmx::DataType::Float64, rdmx::ReduceOp::Sum);
  return sum / n_;
}

double Bench::expected_reduction(std::size_t i) const {
  std::int64_t acc = reduce_input(0, i, o_.redop);
  for (int r = 1; r < n_; ++r) {
    const std::int64_t v = reduce_input(r, i, o_.redop);
    switch (o_.redop) {
      case kSum:
      case kAvg: acc += v; break;
      case kProd: acc *= v; break;
      case kMin: acc = std::min(acc, v); break;
      case kMax: acc = std::max(acc, v); break;
      default: break;
    }
  }
  if (o_.redop == kAvg) return as_type(o_.type, static_cast<double>(acc) / n_);
  // Integers wrap as the library's arithmetic does; small floats are exact.
  return as_type(o_.type, static_cast<double>(acc));
}

bool Bench::same(double got, double want) const {
  if (o_.redop == kAvg && is_reduction(o_.op)) {
    // One rounding of the type apart at most (fp16 and bf16 are reduced in fp32
    // and rounded per step).
    const double tolerance = o_.type == kFp32 ? 1e-6 : o_.type == kFp64 ? 1e-12 : 1e-2;
    return std::fabs(got - want) <= tolerance * std::max(1.0, std::fabs(want));
  }
  return got == want;
}

// Fill inputs and outputs, run once, count wrong elements over all ranks.
// Device buffers are filled from and read back into host copies through the
// driver, each copy landed before the next step.
long long Bench::check_once(const Layout& l, bool inplace) {
  if (o_.op == Op::Barrier) {
    run_once(l, inplace);
    return 0;
  }
  const int t = o_.type;
  const std::size_t n = l.count, total = std::max(l.send_elems, l.recv_elems);
  unsigned char *in = nullptr, *out = nullptr;
  placement(h_, l, inplace, in, out);
  for (std::size_t i = 0; i < l.send_elems; ++i) store(h_.send, t, i, kSentinel);
  for (std::size_t i = 0; i < total; ++i) store(h_.recv, t, i, kSentinel);
  const bool is_root = rank_ == o_.root;
  switch (o_.op) {
    case Op::AllReduce:
    case Op::Reduce:
    case Op::ReduceScatter:
      for (std::size_t i = 0; i < l.send_elems; ++i)
        store(in, t, i, static_cast<double>(reduce_input(rank_, i, o_.redop)));
      break;
    case Op::AllGather:
    case Op::Gather:
      for (std::size_t i = 0; i < n; ++i) store(in, t, i, static_cast<double>(move_input(rank_, i)));
      break;
    case Op::Broadcast:
      if (is_root) {
        for (std::size_t i = 0; i < n; ++i) store(out, t, i, static_cast<double>(move_input(rank_, i)));
      }
      break;
    case Op::AllToAll:
      for (std::size_t i = 0; i < l.send_elems; ++i) store(in, t, i, static_cast<double>(move_input(rank_, i)));
      break;
    case Op::Scatter:
      if (is_root) {
        for (std::size_t i = 0; i < l.send_elems; ++i) store(in, t, i, static_cast<double>(move_input(rank_, i)));
      }
      break;
    default: break;
  }
  const std::size_t esize = kTypeSizes[t];
  if (device_ != nullptr) {
    device_->gpu->copy(b_.send, h_.send, l.send_elems * esize);
    device_->gpu->copy(b_.recv, h_.recv, total * esize);
  }
  run_once(l, inplace);
  if (device_ != nullptr) device_->gpu->copy(h_.recv, b_.recv, total * esize);
  std::int64_t wrong = 0;
  const auto un = static_cast<std::size_t>(rank_);
  switch (o_.op) {
    case Op::AllReduce:
    case Op::Reduce:
      if (o_.op == Op::AllReduce || is_root) {
        for (std::size_t i = 0; i < n; ++i) wrong += !same(load(out, t, i), expected_reduction(i));
      }
      break;
    case Op::ReduceScatter:
      for (std::size_t i = 0; i < n; ++i) wrong += !same(load(out, t, i), expected_reduction(un * n + i));
      break;
    case Op::AllGather:
    case Op::Gather:
      if (o_.op == Op::AllGather || is_root) {
        for (int r = 0; r < n_; ++r) {
          for (std::size_t i = 0; i < n; ++i) {
            wrong +=
                load(out, t, static_cast<std::size_t>(r) * n + i) != as_type(t, static_cast<double>(move_input(r, i)));
          }
        }
      }
      break;
    case Op::Broadcast:
      for (std::size_t i = 0; i < n; ++i) {
        wrong += load(out, t, i) != as_type(t, static_cast<double>(move_input(o_.root, i)));
      }
      break;
    case Op::AllToAll:
      for (int r = 0; r < n_; ++r) {
        for (std::size_t i = 0; i < n; ++i) {
          wrong += load(out, t, static_cast<std::size_t>(r) * n + i) !=
                   as_type(t, static_cast<double>(move_input(r, un * n + i)));
        }
      }
      break;
    case Op::Scatter:
      for (std::size_t i = 0; i < n; ++i) {
        wrong += load(out, t, i) != as_type(t, static_cast<double>(move_input(o_.root, un * n + i)));
      }
      break;
    default: break;
  }
  std::int64_t total_wrong = 0;
  comm_.all_reduce(&wrong, &total_wrong, 1, rdmx::DataType::Int64, rdmx::ReduceOp::Sum);
  return total_wrong;
}

std::string Bench::transport() const {
  std::set<std::string> names;
  for (const std::string& p : comm_.peer_providers()) {
    if (!p.empty()) names.insert(p);
  }
  std::string joined;
  for (const std::string& name : names) joined += (joined.empty() ? "" : "+") + name;
  if (!joined.empty()) return joined;
  const char* env = std::getenv("RDMX_PROVIDER");
  return env != nullptr && *env != '\0' ? env : "self";
}

std::string format_time(double us) {
  char text[32];
  std::snprintf(text, sizeof text, us < 10 ? "%.3f" : us < 100 ? "%.2f" : us < 10000 ? "%.1f" : "%.0f", us);
  return text;
}

std::string format_bw(double gbps) {
  char text[32];
  std::snprintf(text, sizeof text, gbps < 10 ? "%.3f" : "%.2f", gbps);
  return text;
}

struct FreeDeleter {
  void operator()(unsigned char* p) const noexcept { std::free(p); }
};

long long Bench::run(JsonLines& lines, json& run, bool table) {
  const Op op = o_.op;
  const std::size_t esize = kTypeSizes[o_.type];
  std::vector<std::size_t> sizes = o_.sizes;
  if (op == Op::Barrier) sizes = {0};

  std::size_t send_max = 0, recv_max = 0;
  for (std::size_t size : sizes) {
    const Layout l = layout_for(op, size, esize, n_);
    send_max = std::max(send_max, l.send_elems);
    recv_max = std::max({recv_max, l.send_elems, l.recv_elems});
  }
  // Page-aligned, touched before any timing.
  auto allocate = [](std::size_t bytes) {
    const std::size_t rounded = (bytes + 64 + 4095) / 4096 * 4096;
    auto* p = static_cast<unsigned char*>(std::aligned_alloc(4096, rounded));
    if (p == nullptr) throw std::bad_alloc();
    std::memset(p, 0, rounded);
    return std::unique_ptr<unsigned char, FreeDeleter>(p);
  };
  // With device buffers, host copies only for the check.
  const bool host_copies = device_ == nullptr || o_.check;
  auto send_buffer = allocate(host_copies ? send_max * esize : 0);
  auto recv_buffer = allocate(host_copies ? recv_max * esize : 0);
  h_.send = send_buffer.get();
  h_.recv = recv_buffer.get();
  b_ = device_ != nullptr ? Buffers{device_->send, device_->recv} : h_;

  const std::string transport_name = transport();
  const char* redop_col = is_reduction(op) ? kRedopNames[o_.redop] : "none";
  const int root_col = is_rooted(op) ? o_.root : -1;
  const char* op_name = kOpNames[static_cast<int>(op)];
  const char* type_name = kTypeNames[o_.type];
  const bool print = table && rank_ == 0;
  if (print) {
    std::printf("# rdmx perf coll: %s, %d ranks, transport %s\n", op_name, n_, transport_name.c_str());
    if (o_.iters > 0) {
      std::printf("# iters %ld", o_.iters);
    } else {
      std::printf("# iters: per size, %.1f s worth (%ld..%ld)", kTargetSeconds, kMinIters, kMaxIters);
    }
    if (o_.warmup >= 0) {
      std::printf(", warmup %ld", o_.warmup);
    } else {
      std::printf(", warmup max(5, iters/10)");
    }
    std::printf(", check %d; time = per call, averaged over ranks; GB = 1e9 B\n#\n", o_.check ? 1 : 0);
    std::printf("# %10s  %12s  %8s  %6s  %6s  %32s  %32s\n", "", "", "", "", "", "out-of-place", "in-place");
    std::printf("# %10s  %12s  %8s  %6s  %6s  %8s  %7s  %7s  %6s  %8s  %7s  %7s  %6s\n", "size", "count", "type",
                "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    std::printf("# %10s  %12s  %8s  %6s  %6s  %8s  %7s  %7s  %6s  %8s  %7s  %7s  %6s\n", "(B)", "(elements)", "", "",
                "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    std::fflush(stdout);
  }

  long long all_wrong = 0;
  double bw_sum = 0;
  int bw_count = 0;
  json rows = json::array();
  const double first_call_us = warm_up_sweep(sizes, esize) * 1e6;
  const std::size_t largest = *std::max_element(sizes.begin(), sizes.end());
  double largest_steady_us = 0;
  for (std::size_t size : sizes) {
    const Layout l = layout_for(op, size, esize, n_);
    if (op != Op::Barrier && l.count == 0) {
      if (print) std::printf("# %zu B: less than one %s per rank, skipped\n", size, type_name);
      continue;
    }
    if (op != Op::Barrier && l.bytes != size && rank_ == 0) {
      // As nccl-tests, a size the operation cannot move exactly is rounded down; the size column shows
      // what ran, and stderr says why it differs from what was asked (stdout may be --json).
      std::fprintf(stderr, "rdmx perf coll: note: %s of %zu B runs as %zu B: %s\n", op_name, size, l.bytes,
                   rounding_reason(op, esize, n_, type_name).c_str());
    }
    const bool first_mode = !has_mode(op, false);
    const long iters = iterations_for(l, first_mode);
    const long warmup = o_.warmup >= 0 ? o_.warmup : std::max(5L, iters / 10);
    std::string cells[2];
    for (int mode = 0; mode <= 1; ++mode) {
      const bool inplace = mode == 1;
      char cell[192];
      if (!has_mode(op, inplace)) {
        std::snprintf(cell, sizeof cell, "  %8s  %7s  %7s  %6s", "n/a", "n/a", "n/a", "n/a");
        cells[mode] = cell;
        continue;
      }
      for (long i = 0; i < warmup; ++i) run_once(l, inplace);
      const double seconds = time_calls(l, inplace, iters);
      const long long wrong = o_.check ? check_once(l, inplace) : -1;
      if (wrong > 0) all_wrong += wrong;
      const double us = seconds * 1e6;
      if (size == largest && inplace == !has_mode(op, false)) largest_steady_us = us;
      const double algbw = seconds > 0 ? static_cast<double>(l.bytes) / 1e9 / seconds : 0;
      const double busbw = algbw * bus_factor(op, n_);
      bw_sum += busbw;
      ++bw_count;
      if (rank_ != 0) continue;
      const std::string w = wrong >= 0 ? std::to_string(wrong) : "n/a";
      std::snprintf(cell, sizeof cell, "  %8s  %7s  %7s  %6s", format_time(us).c_str(), format_bw(algbw).c_str(),
                    format_bw(busbw).c_str(), w.c_str());
      cells[mode] = cell;
      json row = {{"bytes", l.bytes},    {"count", l.count},   {"type", type_name}, {"redop", redop_col},
                  {"root", root_col},    {"inplace", inplace}, {"time_us", us},     {"algbw_GBps", algbw},
                  {"busbw_GBps", busbw}, {"wrong", wrong},     {"iters", iters}};
      json line = row;
      line["bench"] = "rdmx";
      line["transport"] = transport_name;
      line["op"] = op_name;
      line["np"] = n_;
      line["memory"] = device_ != nullptr ? "cuda" : "host";
      lines.write(line);
      rows.push_back(std::move(row));
    }
    if (print) {
      std::printf("  %10zu  %12zu  %8s  %6s  %6d%s%s\n", l.bytes, l.count, type_name, redop_col, root_col,
                  cells[0].c_str(), cells[1].c_str());
      std::fflush(stdout);
    }
  }
  const double avg_busbw = bw_count > 0 ? bw_sum / bw_count : 0.0;
  if (print) {
    std::printf("# Out of bounds values : %lld %s\n", all_wrong,
                o_.check ? (all_wrong == 0 ? "OK" : "FAILED") : "(not checked)");
    std::printf("# Avg bus bandwidth    : %.4g\n", avg_busbw);
    std::printf(
        "# First call           : %s us (%zu B, %s, before the sweep's warm-up; %s us per call in its row)\n#\n",
        format_time(first_call_us).c_str(), layout_for(op, largest, esize, n_).bytes,
        has_mode(op, false) ? "out-of-place" : "in-place", format_time(largest_steady_us).c_str());
  }
  run = {{"collective", op_name},
         {"np", n_},
         {"transport", transport_name},
         {"type", type_name},
         {"redop", redop_col},
         {"root", root_col},
         {"check", o_.check},
         {"wrong", o_.check ? all_wrong : -1},
         {"avg_busbw_GBps", avg_busbw},
         {"first_call_us", first_call_us},
         {"first_call_steady_us", largest_steady_us},
         {"results", std::move(rows)}};
  // Nobody leaves while a peer may still read from it.
  comm_.barrier();
  return all_wrong;
}

}  // namespace rdmx::cli::perf_coll
