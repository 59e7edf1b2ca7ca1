// SPDX-License-Identifier: MIT
#include "coll/flight_recorder.hpp"

#include "services/settings.hpp"

namespace rdmx::coll {
namespace {

// Eight: a step of DDP or FSDP shows whole, and a rank's record stays a few
// KiB in the store.
constexpr core::IntegerSetting kHistory{
    "RDMX_HISTORY",
    8,
    0,
    1024,
    "collectives",
    "how many of its last collectives each rank keeps for stall reports and timeouts (0: none)"};
RDMX_SETTING(kHistory);

}  // namespace

std::int64_t unix_ms_now() noexcept {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::size_t FlightRecorder::configured_capacity() { return static_cast<std::size_t>(kHistory.read()); }

void FlightRecorder::entered(const OpDesc& desc, std::uint64_t bytes) {
  const std::int64_t now = unix_ms_now();
  core::LockGuard lock(mutex_);
  inside_ = true;
  since_ms_ = now;
  ++changes_;
  current_op_ = desc.op;
  current_bytes_ = bytes;
  current_start_ = std::chrono::steady_clock::now();
  if (capacity_ == 0) return;
  if (records_.size() == capacity_) records_.pop_front();
  records_.push_back({.desc = desc, .bytes = bytes, .entered_ms = now});
}

void FlightRecorder::left(std::uint64_t seq, bool ok) {
  const std::int64_t now = unix_ms_now();
  const auto end = std::chrono::steady_clock::now();
  core::LockGuard lock(mutex_);
  if (inside_) {
    OperationTotals& total = totals_[current_op_];
    ++(ok ? total.done : total.failed);
    total.bytes += current_bytes_;
    total.seconds += std::chrono::duration<double>(end - current_start_).count();
  }
  inside_ = false;
  since_ms_ = now;
  ++changes_;
  if (!records_.empty() && records_.back().desc.seq == seq) {
    records_.back().left_ms = now;
    records_.back().outcome = ok ? CollectiveRecord::Outcome::Done : CollectiveRecord::Outcome::Failed;
  }
}

FlightRecorder::Snapshot FlightRecorder::snapshot() const {
  core::LockGuard lock(mutex_);
  return {.history = {records_.begin(), records_.end()}, .inside = inside_, .since_ms = since_ms_, .changes = changes_};
}

std::map<CollOp, OperationTotals> FlightRecorder::totals() const {
  core::LockGuard lock(mutex_);
  return totals_;
}

}  // namespace rdmx::coll
