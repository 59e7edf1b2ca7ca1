// SPDX-License-Identifier: MIT
// rdmx perf coll: rdmx's collectives measured as nccl-tests measures NCCL's,
// with nccl-tests' flags, columns and bus-bandwidth factors. Only the public
// API (rdmx/comm.hpp) is used.
//
// - Size: bytes per rank as in nccl-tests: the buffer for all_reduce, broadcast
//   and reduce; the receive buffer in total for all_gather and gather (each rank
//   sends size/type/np elements); the send buffer in total for reduce_scatter
//   and scatter; the whole send (= receive) buffer for all_to_all. The "count"
//   column is the count passed to the call, and "size" the larger of send and
//   receive bytes.
// - Bandwidth: algbw = size / time (GB = 1e9 bytes); busbw = algbw x factor,
//   nccl-tests' factors: all_reduce 2(n-1)/n; all_gather, reduce_scatter,
//   all_to_all, gather and scatter (n-1)/n; broadcast and reduce 1.
// - Timing: a barrier, then `iters` back-to-back calls; each rank's time per
//   call, averaged over the ranks (nccl-tests' default -a 1). Iterations: -n,
//   or per size from a calibration: 5 untimed calls, a barrier, 3 timed calls;
//   iters = 0.2 s / (rank 0's time per call), at least 5, at most 10000, rank
//   0's choice broadcast. Warm-up: before the sweep, as nccl-tests, -w calls
//   (default 5) at the largest and the smallest size, the largest run until
//   64 MiB per rank have moved (at most 200 calls); then before each row -w,
//   or max(5, iters / 10), untimed calls. The sweep's very first call is
//   timed and printed as "First call" beside its row's steady state.
// - Out-of-place and in-place rows, as nccl-tests. In place: all_reduce, reduce
//   and all_to_all pass the same buffer twice; reduce_scatter passes recv =
//   send + rank * count (nccl-tests); all_gather and gather pass send = recv +
//   rank * count; scatter passes recv = send + rank * count. broadcast is in
//   place only and barrier has no buffer: their other column is n/a.
// - Check (-c 1, after the timed calls of each row): inputs get small integers
//   that depend on rank and index, outputs a sentinel, one call, then every
//   output element is compared with the result computed here; #wrong is the
//   number of wrong elements summed over the ranks. Reductions use
//   ((rank+1)*(i%7+1)) % 16 (prod: 1 + that % 2, so products stay exact), data
//   movement (rank*17 + (i%101)*5 + 3) % 101: every result is exact in every
//   type (avg, floating types only, is compared to within one rounding).
#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "coll_memory.hpp"
#include "commands.hpp"
#include "local_job.hpp"
#include "perf_common.hpp"
#include "rdmx/comm.hpp"
#include "rdmx/error.hpp"

namespace rdmx::cli {
namespace {

using nlohmann::json;

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

enum class Op { AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll, Gather, Scatter, Barrier };
constexpr const char* kOpNames[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
                                    "all_to_all", "gather",     "scatter",        "barrier"};
// nccl-tests' binary names without "_perf" (allreduce_perf is all_reduce_perf's old spelling elsewhere).
constexpr const char* kOpAliases[] = {"allreduce", "allgather", "reducescatter", "bcast", "",
                                      "alltoall",  "",          "",              ""};

// nccl-tests' type names first; rdmx's names (DataType) are accepted too.
constexpr const char* kTypeNames[] = {"int8", "uint8", "int32", "uint32", "int64",
                                      "uint64", "half", "bfloat16", "float", "double"};
constexpr const char* kTypeAliases[] = {"", "", "int", "", "", "", "fp16", "bf16", "fp32", "fp64"};
constexpr rdmx::DataType kTypes[] = {rdmx::DataType::Int8,    rdmx::DataType::Uint8,    rdmx::DataType::Int32,
                                     rdmx::DataType::Uint32,  rdmx::DataType::Int64,    rdmx::DataType::Uint64,
                                     rdmx::DataType::Float16, rdmx::DataType::BFloat16, rdmx::DataType::Float32,
                                     rdmx::DataType::Float64};
constexpr std::size_t kTypeSizes[] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};
enum TypeIndex { kInt8, kUint8, kInt32, kUint32, kInt64, kUint64, kFp16, kBf16, kFp32, kFp64 };

constexpr const char* kRedopNames[] = {"sum", "prod", "min", "max", "avg"};
constexpr rdmx::ReduceOp kRedops[] = {rdmx::ReduceOp::Sum, rdmx::ReduceOp::Prod, rdmx::ReduceOp::Min,
                                      rdmx::ReduceOp::Max, rdmx::ReduceOp::Avg};
enum RedopIndex { kSum, kProd, kMin, kMax, kAvg };

// One sweep: a collective, a type and a reduction over the sizes.
struct Options {
  Op op = Op::AllReduce;
  std::vector<std::size_t> sizes;
  int type = kFp32;
  int redop = kSum;
  int root = 0;
  long iters = 0;    // 0: per size, from a calibration
  long warmup = -1;  // -1: max(5, iters / 10)
  bool check = true;
};

// What the command line asked for, before it is split into sweeps.
struct Request {
  std::vector<std::string> ops;
  std::string min_bytes = "8";
  std::string max_bytes = "64M";
  double step_factor = 2;
  std::string step_bytes;
  std::string sizes;
  long iters = 0;
  long warmup = -1;
  int check = 1;
  std::string redop = "sum";
  std::string type = "float";
  int root = 0;
  int np = 0;
  std::string provider;
  bool json = false;
  std::string json_lines;
};

template <std::size_t N>
std::vector<int> lookup(const char* const (&names)[N], const char* const (&aliases)[N], const std::string& value,
                        const std::string& option) {
  std::vector<int> found;
  for (std::size_t i = 0; i < N; ++i) {
    if (value == "all" || value == names[i] || (*aliases[i] != '\0' && value == aliases[i])) {
      found.push_back(static_cast<int>(i));
    }
  }
  if (found.empty()) {
    std::string known;
    for (const char* name : names) known += std::string(known.empty() ? "" : ", ") + name;
    throw UsageError{option + ": unknown '" + value + "' (known: " + known + ", all)"};
  }
  return found;
}

std::vector<std::size_t> sweep_sizes(const Request& r) {
  if (!r.sizes.empty()) return parse_size_list(r.sizes, "--sizes");
  const std::size_t low = parse_size(r.min_bytes, "-b");
  const std::size_t high = parse_size(r.max_bytes, "-e");
  if (high < low) throw UsageError{"-e " + r.max_bytes + " is below -b " + r.min_bytes};
  std::vector<std::size_t> sizes;
  if (!r.step_bytes.empty()) {
    const std::size_t step = parse_size(r.step_bytes, "-i");
    if (step == 0) throw UsageError{"-i must be positive"};
    for (std::size_t size = low; size <= high; size += step) sizes.push_back(size);
  } else {
    if (r.step_factor <= 1 && low != high) throw UsageError{"-f must be above 1 (or give -i STEPBYTES)"};
    for (double size = static_cast<double>(low); size <= static_cast<double>(high); size *= r.step_factor) {
      sizes.push_back(static_cast<std::size_t>(size));
      if (low == high || size == 0) break;
    }
  }
  return sizes;
}

// ---------------------------------------------------------------------------
// Operations: what each moves, and how fast that is.

bool is_reduction(Op op) { return op == Op::AllReduce || op == Op::ReduceScatter || op == Op::Reduce; }
bool is_rooted(Op op) { return op == Op::Broadcast || op == Op::Reduce || op == Op::Gather || op == Op::Scatter; }
bool is_floating_type(int type) { return type == kFp16 || type == kBf16 || type == kFp32 || type == kFp64; }

// Which rows the API has: broadcast is in place only, barrier has no buffer.
bool has_mode(Op op, bool inplace) {
  if (op == Op::Barrier) return !inplace;
  if (op == Op::Broadcast) return inplace;
  return true;
}

struct Layout {
  std::size_t count = 0;       // the count passed to the call
  std::size_t send_elems = 0;  // elements in the send buffer
  std::size_t recv_elems = 0;  // elements in the receive buffer
  std::size_t bytes = 0;       // the size reported: max(send, recv) bytes
};

Layout layout_for(Op op, std::size_t bytes, std::size_t esize, int n) {
  Layout l;
  const std::size_t un = static_cast<std::size_t>(n);
  const std::size_t per_rank = bytes / esize / un;
  switch (op) {
    case Op::AllReduce: case Op::Broadcast: case Op::Reduce:
      l.count = bytes / esize;
      l.send_elems = l.recv_elems = l.count;
      break;
    case Op::AllGather: case Op::Gather:
      l.count = per_rank;
      l.send_elems = per_rank;
      l.recv_elems = per_rank * un;
      break;
    case Op::ReduceScatter: case Op::Scatter:
      l.count = per_rank;
      l.send_elems = per_rank * un;
      l.recv_elems = per_rank;
      break;
    case Op::AllToAll:
      l.count = per_rank;
      l.send_elems = l.recv_elems = per_rank * un;
      break;
    case Op::Barrier:
      break;
  }
  l.bytes = std::max(l.send_elems, l.recv_elems) * esize;
  return l;
}

// Why layout_for() rounds a size down: whole elements, and for the
// operations that split the buffer, the same number of them per rank.
std::string rounding_reason(Op op, std::size_t esize, int n, const char* type) {
  const bool split = op == Op::AllGather || op == Op::Gather || op == Op::ReduceScatter || op == Op::Scatter ||
                     op == Op::AllToAll;
  std::string why = std::string("whole ") + type + " elements (" + std::to_string(esize) + " B each)";
  if (!split) return why + ", so a multiple of " + std::to_string(esize) + " B";
  return why + ", the same number per rank, so a multiple of " + std::to_string(esize * static_cast<std::size_t>(n)) +
         " B with " + std::to_string(n) + " ranks";
}

double bus_factor(Op op, int n) {
  switch (op) {
    case Op::AllReduce: return 2.0 * (n - 1) / n;
    case Op::AllGather: case Op::ReduceScatter: case Op::AllToAll: case Op::Gather: case Op::Scatter:
      return static_cast<double>(n - 1) / n;
    default: return 1.0;
  }
}

// ---------------------------------------------------------------------------
// Elements: stored and read back through a double (every value here is a
// small integer, or an average of them).

std::uint16_t float_to_half(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t exponent = (x >> 23) & 0xffu;
  std::uint32_t mantissa = x & 0x7fffffu;
  if (exponent == 0xff) return static_cast<std::uint16_t>(sign | 0x7c00u | (mantissa != 0 ? 0x200u : 0));
  const int e = static_cast<int>(exponent) - 127 + 15;
  if (e >= 31) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (e <= 0) {  // subnormal or zero
    if (e < -10) return static_cast<std::uint16_t>(sign);
    mantissa |= 0x800000u;
    const int shift = 14 - e;
    std::uint32_t h = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1u))) ++h;
    return static_cast<std::uint16_t>(sign | h);
  }
  std::uint32_t h = sign | (static_cast<std::uint32_t>(e) << 10) | (mantissa >> 13);
  const std::uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry rounds into the exponent
  return static_cast<std::uint16_t>(h);
}

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

std::uint16_t float_to_bf16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // NaN
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float bf16_to_float(std::uint16_t b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }

template <typename T>
T& at(void* buf, std::size_t i) {
  return static_cast<T*>(buf)[i];
}
template <typename T>
T at(const void* buf, std::size_t i) {
  return static_cast<const T*>(buf)[i];
}

void store(void* buf, int type, std::size_t i, double v) {
  const auto whole = static_cast<std::int64_t>(v);
  switch (type) {
    case kInt8: at<std::int8_t>(buf, i) = static_cast<std::int8_t>(whole); break;
    case kUint8: at<std::uint8_t>(buf, i) = static_cast<std::uint8_t>(whole); break;
    case kInt32: at<std::int32_t>(buf, i) = static_cast<std::int32_t>(whole); break;
    case kUint32: at<std::uint32_t>(buf, i) = static_cast<std::uint32_t>(whole); break;
    case kInt64: at<std::int64_t>(buf, i) = whole; break;
    case kUint64: at<std::uint64_t>(buf, i) = static_cast<std::uint64_t>(whole); break;
    case kFp16: at<std::uint16_t>(buf, i) = float_to_half(static_cast<float>(v)); break;
    case kBf16: at<std::uint16_t>(buf, i) = float_to_bf16(static_cast<float>(v)); break;
    case kFp32: at<float>(buf, i) = static_cast<float>(v); break;
    case kFp64: at<double>(buf, i) = v; break;
    default: break;
  }
}

double load(const void* buf, int type, std::size_t i) {
  switch (type) {
    case kInt8: return at<std::int8_t>(buf, i);
    case kUint8: return at<std::uint8_t>(buf, i);
    case kInt32: return at<std::int32_t>(buf, i);
    case kUint32: return at<std::uint32_t>(buf, i);
    case kInt64: return static_cast<double>(at<std::int64_t>(buf, i));
    case kUint64: return static_cast<double>(at<std::uint64_t>(buf, i));
    case kFp16: return half_to_float(at<std::uint16_t>(buf, i));
    case kBf16: return bf16_to_float(at<std::uint16_t>(buf, i));
    case kFp32: return at<float>(buf, i);
    case kFp64: return at<double>(buf, i);
    default: return 0;
  }
}

// The value as the type holds it (integers wrap, floats round).
double as_type(int type, double v) {
  alignas(8) unsigned char cell[8];
  store(cell, type, 0, v);
  return load(cell, type, 0);
}

// The check patterns, the same in the three benchmarks.
std::int64_t reduce_input(int r, std::size_t i, int redop) {
  const std::int64_t base = (static_cast<std::int64_t>(r + 1) * static_cast<std::int64_t>(i % 7 + 1)) % 16;
  return redop == kProd ? 1 + base % 2 : base;
}
std::int64_t move_input(int r, std::size_t i) {
  return (static_cast<std::int64_t>(r) * 17 + static_cast<std::int64_t>(i % 101) * 5 + 3) % 101;
}
constexpr double kSentinel = -1.0;

// ---------------------------------------------------------------------------

class Bench {
 public:
  Bench(const Options& o, rdmx::Communicator& comm) : o_(o), comm_(comm), rank_(comm.rank()), n_(comm.size()) {}

  // One sweep; rank 0 prints its table (unless `table` is false) and fills `run`. Returns #wrong.
  long long run(JsonLines& lines, json& run, bool table);
  std::string transport() const;

 private:
  struct Buffers {
    unsigned char* send = nullptr;  // send_elems of the largest size
    unsigned char* recv = nullptr;  // max(send_elems, recv_elems) of the largest size
  };

  void placement(const Layout& l, bool inplace, unsigned char*& in, unsigned char*& out) const;
  void run_once(const Layout& l, bool inplace);
  double time_calls(const Layout& l, bool inplace, long iters);
  long iterations_for(const Layout& l, bool inplace);
  double warm_up_sweep(const std::vector<std::size_t>& sizes, std::size_t esize);
  long long check_once(const Layout& l, bool inplace);
  double expected_reduction(std::size_t i) const;
  bool same(double got, double want) const;

  const Options& o_;
  rdmx::Communicator& comm_;
  int rank_, n_;
  Buffers b_;
};

void Bench::placement(const Layout& l, bool inplace, unsigned char*& in, unsigned char*& out) const {
  const std::size_t block = l.count * kTypeSizes[o_.type];
  in = b_.send;
  out = b_.recv;
  if (!inplace) return;
  in = b_.recv;
  switch (o_.op) {
    case Op::AllGather: case Op::Gather: in = b_.recv + static_cast<std::size_t>(rank_) * block; break;
    case Op::Scatter: out = b_.recv + static_cast<std::size_t>(rank_) * block; break;
    case Op::ReduceScatter: out = b_.recv + static_cast<std::size_t>(rank_) * block; break;
    default: break;
  }
}

void Bench::run_once(const Layout& l, bool inplace) {
  unsigned char *in = nullptr, *out = nullptr;
  placement(l, inplace, in, out);
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

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

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
      large.bytes == 0 ? calls
                       : std::max(calls, std::min(kMaxSweepWarmup, static_cast<long>(std::ceil(
                                                                       kSweepWarmupBytes / static_cast<double>(large.bytes)))));
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
      case kSum: case kAvg: acc += v; break;
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
long long Bench::check_once(const Layout& l, bool inplace) {
  if (o_.op == Op::Barrier) {
    run_once(l, inplace);
    return 0;
  }
  const int t = o_.type;
  const std::size_t n = l.count, total = std::max(l.send_elems, l.recv_elems);
  unsigned char *in = nullptr, *out = nullptr;
  placement(l, inplace, in, out);
  for (std::size_t i = 0; i < l.send_elems; ++i) store(b_.send, t, i, kSentinel);
  for (std::size_t i = 0; i < total; ++i) store(b_.recv, t, i, kSentinel);
  const bool is_root = rank_ == o_.root;
  switch (o_.op) {
    case Op::AllReduce: case Op::Reduce: case Op::ReduceScatter:
      for (std::size_t i = 0; i < l.send_elems; ++i) store(in, t, i, static_cast<double>(reduce_input(rank_, i, o_.redop)));
      break;
    case Op::AllGather: case Op::Gather:
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
  run_once(l, inplace);
  std::int64_t wrong = 0;
  const auto un = static_cast<std::size_t>(rank_);
  switch (o_.op) {
    case Op::AllReduce: case Op::Reduce:
      if (o_.op == Op::AllReduce || is_root) {
        for (std::size_t i = 0; i < n; ++i) wrong += !same(load(out, t, i), expected_reduction(i));
      }
      break;
    case Op::ReduceScatter:
      for (std::size_t i = 0; i < n; ++i) wrong += !same(load(out, t, i), expected_reduction(un * n + i));
      break;
    case Op::AllGather: case Op::Gather:
      if (o_.op == Op::AllGather || is_root) {
        for (int r = 0; r < n_; ++r) {
          for (std::size_t i = 0; i < n; ++i) {
            wrong += load(out, t, static_cast<std::size_t>(r) * n + i) != as_type(t, static_cast<double>(move_input(r, i)));
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
  auto send_buffer = allocate(send_max * esize);
  auto recv_buffer = allocate(recv_max * esize);
  b_.send = send_buffer.get();
  b_.recv = recv_buffer.get();

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
      json row = {{"bytes", l.bytes},     {"count", l.count},     {"type", type_name},   {"redop", redop_col},
                  {"root", root_col},     {"inplace", inplace},   {"time_us", us},       {"algbw_GBps", algbw},
                  {"busbw_GBps", busbw},  {"wrong", wrong},       {"iters", iters}};
      json line = row;
      line["bench"] = "rdmx";
      line["transport"] = transport_name;
      line["op"] = op_name;
      line["np"] = n_;
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
    std::printf("# First call           : %s us (%zu B, %s, before the sweep's warm-up; %s us per call in its row)\n#\n",
                format_time(first_call_us).c_str(), layout_for(op, largest, esize, n_).bytes,
                has_mode(op, false) ? "out-of-place" : "in-place", format_time(largest_steady_us).c_str());
  }
  run = {{"collective", op_name},      {"np", n_},
         {"transport", transport_name}, {"type", type_name},
         {"redop", redop_col},         {"root", root_col},
         {"check", o_.check},          {"wrong", o_.check ? all_wrong : -1},
         {"avg_busbw_GBps", avg_busbw}, {"first_call_us", first_call_us},
         {"first_call_steady_us", largest_steady_us}, {"results", std::move(rows)}};
  // Nobody leaves while a peer may still read from it.
  comm_.barrier();
  return all_wrong;
}

// Every (collective, type, reduction) the request names, as sweeps. Pairs the
// library does not define (avg on integers, reductions on barrier) are left
// out when "all" asked for them, and an error when named.
std::vector<Options> plan(const Request& r) {
  const std::vector<std::size_t> sizes = sweep_sizes(r);
  std::vector<int> ops;
  for (const auto& name : r.ops) {
    for (int op : lookup(kOpNames, kOpAliases, name, "collective")) {
      if (std::find(ops.begin(), ops.end(), op) == ops.end()) ops.push_back(op);
    }
  }
  const std::vector<int> types = lookup(kTypeNames, kTypeAliases, r.type, "-d");
  const char* const no_aliases[] = {"", "", "", "", ""};
  const std::vector<int> redops = lookup(kRedopNames, no_aliases, r.redop, "-o");
  std::vector<Options> sweeps;
  for (int op : ops) {
    for (int type : types) {
      for (int redop : redops) {
        Options o;
        o.op = static_cast<Op>(op);
        o.sizes = sizes;
        o.type = type;
        o.redop = redop;
        o.root = r.root;
        o.iters = r.iters;
        o.warmup = r.warmup;
        o.check = r.check != 0;
        const bool reduction = is_reduction(o.op);
        if (!reduction && redop != redops.front()) continue;  // the reduction does not apply: one sweep
        if (o.op == Op::Barrier && type != types.front()) continue;
        if (reduction && redop == kAvg && !is_floating_type(type)) {
          if (r.redop == "all" || r.type == "all") continue;
          throw UsageError{std::string("-o avg is for floating types (half, bfloat16, float, double), not ") +
                           kTypeNames[type]};
        }
        sweeps.push_back(o);
      }
    }
  }
  return sweeps;
}

// Bytes of test buffers one rank allocates for the sweeps (Bench::run).
std::size_t test_buffer_bytes(const std::vector<Options>& sweeps, int n) {
  std::size_t most = 0;
  for (const Options& o : sweeps) {
    std::size_t send = 0, recv = 0;
    for (std::size_t size : o.sizes) {
      const Layout l = layout_for(o.op, size, kTypeSizes[o.type], n);
      send = std::max(send, l.send_elems);
      recv = std::max({recv, l.send_elems, l.recv_elems});
    }
    most = std::max(most, (send + recv) * kTypeSizes[o.type]);
  }
  return most;
}

void run(const Request& r, const std::vector<Options>& sweeps) {
  std::unique_ptr<rdmx::Communicator> comm = rdmx::Communicator::from_env();
  if (r.root >= comm->size()) {
    throw Error(ErrorCode::InvalidArgument,
                "-r " + std::to_string(r.root) + " is not a rank of " + std::to_string(comm->size()),
                {.op = "perf coll", .hint = "pick a root below the number of ranks"});
  }
  JsonLines lines(comm->rank() == 0 ? r.json_lines : std::string(), "--json-lines");
  json document = {{"schema", "rdmx.perf.coll/1"}, {"np", comm->size()}, {"runs", json::array()}};
  long long wrong = 0;
  for (const Options& o : sweeps) {
    Bench bench(o, *comm);
    json one;
    wrong += bench.run(lines, one, !r.json);
    document["runs"].push_back(std::move(one));
  }
  if (comm->rank() == 0 && r.json) std::printf("%s\n", document.dump(2).c_str());
  if (wrong > 0) {
    if (comm->rank() == 0) std::fprintf(stderr, "rdmx perf coll: %lld wrong elements\n", wrong);
    throw ExitStatus{kExitWrong};
  }
}

}  // namespace

void register_perf_coll(CLI::App& perf) {
  auto* cmd = perf.add_subcommand(
      "coll",
      "nccl-tests-style sweeps of collectives: all_reduce, all_gather, reduce_scatter, broadcast, reduce, "
      "all_to_all, gather, scatter, barrier (or all). Run under a launcher, or alone: it then starts --np local "
      "ranks itself.");
  auto r = std::make_shared<Request>();
  cmd->add_option("collectives", r->ops, "collectives, comma-separated, or all")->required()->delimiter(',');
  cmd->add_option("-b,--minbytes", r->min_bytes, "smallest size (default 8)");
  cmd->add_option("-e,--maxbytes", r->max_bytes, "largest size (default 64M)");
  cmd->add_option("-f,--stepfactor", r->step_factor, "multiply the size by this between steps (default 2)");
  cmd->add_option("-i,--stepbytes", r->step_bytes, "add this to the size between steps (instead of -f)");
  cmd->add_option("--sizes", r->sizes, "explicit sizes instead of -b/-e: 4,4K,1M or 4K..16M");
  cmd->add_option("-n,--iters", r->iters, "timed iterations per size (default: 0.2 s worth, 5..10000)")
      ->check(CLI::Range(1L, 100000000L));
  cmd->add_option("-w,--warmup_iters", r->warmup, "untimed iterations per size (default max(5, iters/10))")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-c,--check", r->check, "check results: 1 (default) or 0")->check(CLI::Range(0, 1));
  cmd->add_option("-o,--op", r->redop, "reduction: sum, prod, min, max, avg, all (default sum)");
  cmd->add_option("-d,--datatype", r->type,
                  "int8, uint8, int32, uint32, int64, uint64, half, bfloat16, float, double, all (default float)");
  cmd->add_option("-r,--root", r->root, "root rank of broadcast, reduce, gather, scatter (default 0)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--np", r->np,
                  "local ranks to start when no launcher started this (default min(4, cores); refused when this "
                  "host's memory cannot hold them)")
      ->check(CLI::Range(1, 65536));
  cmd->add_option("--provider", r->provider, "sets RDMX_PROVIDER: shm, verbs, tcp or auto")->check(provider_names());
  cmd->add_flag("--json", r->json, "print one JSON document (docs/schemas/perf_coll.schema.json) instead of tables");
  cmd->add_option("--json-lines", r->json_lines, "also append one JSON object per row to this file");
  cmd->callback([r] {
    std::vector<Options> sweeps;
    try {
      sweeps = plan(*r);  // every rank would find the same mistake; say it once, before any starts
    } catch (const UsageError& e) {
      throw CLI::ValidationError("perf coll", e.message);
    }
    if (!r->provider.empty()) ::setenv("RDMX_PROVIDER", r->provider.c_str(), 1);
    const int np = r->np > 0 ? r->np : default_local_ranks();
    if (!launcher_present()) refuse_local_ranks_beyond_memory(np, test_buffer_bytes(sweeps, np));
    if (run_self_as_local_ranks(np, "rdmx perf coll")) return;
    run(*r, sweeps);
  });
}

}  // namespace rdmx::cli
