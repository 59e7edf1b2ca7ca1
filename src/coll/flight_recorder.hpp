// SPDX-License-Identifier: MIT
// A communicator's last RDMX_HISTORY collectives on this rank (operation,
// sizes, sequence number, when it entered and left each, how each ended),
// and when the rank last made progress: what stall reports and timeouts
// show of a rank. The executor's thread writes it, the status publisher
// reads it; the lock is uncontended but for those reads.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "coll/op_desc.hpp"
#include "services/mutex.hpp"

namespace rdmx::coll {

struct CollectiveRecord {
  // The call, described (describe()) only when read: a collective pays for
  // no formatting.
  OpDesc desc;
  std::uint64_t bytes = 0;      // as nccl-tests counts them (profile::counted_bytes)
  std::int64_t entered_ms = 0;  // Unix time, ms
  std::int64_t left_ms = 0;     // 0 while inside
  enum class Outcome : std::uint8_t { Running, Done, Failed } outcome = Outcome::Running;
};

// What one operation has cost this rank since the communicator was made
// (the metrics endpoint's counters).
struct OperationTotals {
  std::uint64_t done = 0;
  std::uint64_t failed = 0;
  std::uint64_t bytes = 0;  // as nccl-tests counts them
  double seconds = 0;
};

class FlightRecorder {
 public:
  explicit FlightRecorder(std::size_t capacity) : capacity_(capacity) {}

  void entered(const OpDesc& desc, std::uint64_t bytes);
  void left(std::uint64_t seq, bool ok);

  struct Snapshot {
    std::vector<CollectiveRecord> history;  // oldest first
    bool inside = false;                    // in a collective now (the last record)
    std::int64_t since_ms = 0;              // when it entered the current one or left the last one; 0: none yet
    std::uint64_t changes = 0;              // advances with every entry and exit
  };
  Snapshot snapshot() const;
  std::map<CollOp, OperationTotals> totals() const;

  // The number of collectives RDMX_HISTORY keeps (0: none).
  static std::size_t configured_capacity();

 private:
  const std::size_t capacity_;
  mutable core::Mutex mutex_;
  std::deque<CollectiveRecord> records_ RDMX_GUARDED_BY(mutex_);
  std::int64_t since_ms_ RDMX_GUARDED_BY(mutex_) = 0;
  bool inside_ RDMX_GUARDED_BY(mutex_) = false;
  std::uint64_t changes_ RDMX_GUARDED_BY(mutex_) = 0;
  // The collective inside now, kept apart from the history (which may keep none).
  CollOp current_op_ RDMX_GUARDED_BY(mutex_) = CollOp::Barrier;
  std::uint64_t current_bytes_ RDMX_GUARDED_BY(mutex_) = 0;
  std::chrono::steady_clock::time_point current_start_ RDMX_GUARDED_BY(mutex_);
  std::map<CollOp, OperationTotals> totals_ RDMX_GUARDED_BY(mutex_);
};

std::int64_t unix_ms_now() noexcept;

}  // namespace rdmx::coll
