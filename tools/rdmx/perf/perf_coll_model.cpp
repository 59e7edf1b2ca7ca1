// SPDX-License-Identifier: MIT
// What each collective of rdmx perf coll moves and how fast that is, and the
// elements it fills and checks.
#include <algorithm>
#include <cstdint>
#include <string>

#include "perf/perf_coll.hpp"
#include "rdmx/half.hpp"

namespace rdmx::cli::perf_coll {

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

Layout layout_for(Op op, std::size_t bytes, std::size_t esize, int n) {
  Layout l;
  const std::size_t un = static_cast<std::size_t>(n);
  const std::size_t per_rank = bytes / esize / un;
  switch (op) {
    case Op::AllReduce:
    case Op::Broadcast:
    case Op::Reduce:
      l.count = bytes / esize;
      l.send_elems = l.recv_elems = l.count;
      break;
    case Op::AllGather:
    case Op::Gather:
      l.count = per_rank;
      l.send_elems = per_rank;
      l.recv_elems = per_rank * un;
      break;
    case Op::ReduceScatter:
    case Op::Scatter:
      l.count = per_rank;
      l.send_elems = per_rank * un;
      l.recv_elems = per_rank;
      break;
    case Op::AllToAll:
      l.count = per_rank;
      l.send_elems = l.recv_elems = per_rank * un;
      break;
    case Op::Barrier: break;
  }
  l.bytes = std::max(l.send_elems, l.recv_elems) * esize;
  return l;
}

// Why layout_for() rounds a size down: whole elements, and for the
// operations that split the buffer, the same number of them per rank.
std::string rounding_reason(Op op, std::size_t esize, int n, const char* type) {
  const bool split =
      op == Op::AllGather || op == Op::Gather || op == Op::ReduceScatter || op == Op::Scatter || op == Op::AllToAll;
  std::string why = std::string("whole ") + type + " elements (" + std::to_string(esize) + " B each)";
  if (!split) return why + ", so a multiple of " + std::to_string(esize) + " B";
  return why + ", the same number per rank, so a multiple of " + std::to_string(esize * static_cast<std::size_t>(n)) +
         " B with " + std::to_string(n) + " ranks";
}

double bus_factor(Op op, int n) {
  switch (op) {
    case Op::AllReduce: return 2.0 * (n - 1) / n;
    case Op::AllGather:
    case Op::ReduceScatter:
    case Op::AllToAll:
    case Op::Gather:
    case Op::Scatter: return static_cast<double>(n - 1) / n;
    default: return 1.0;
  }
}

// ---------------------------------------------------------------------------
// Elements: stored and read back through a double (every value here is a
// small integer, or an average of them).

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

}  // namespace rdmx::cli::perf_coll
