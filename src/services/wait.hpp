// SPDX-License-Identifier: MIT
// The one way rdmx waits: spin briefly (RDMX_SPIN_US), then block on a futex
// until notified, a deadline passes, or waits are aborted. Every blocking call
// in rdmx goes through wait_until(), so timeouts and abort behave the same
// everywhere, and ranks that outnumber cores do not starve each other.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>

#include "rdmx/verbs.hpp"

namespace rdmx::core {

using Clock = std::chrono::steady_clock;

// The two words blocked waiters sleep on. Plain atomics, so they may lie
// in memory several processes map (a region's state page); a word there is
// waited on and woken as a shared futex, keyed by the page, not by the
// address space.
struct WakeWords {
  std::atomic<std::uint32_t> epoch{0};
  std::atomic<std::uint32_t> sleepers{0};
};
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

// Advances shared `words` and wakes every thread sleeping on them, in any
// process. Cheap when nobody sleeps.
void ring(WakeWords& words) noexcept;

// An event counter that blocked waiters sleep on: this process's own words,
// or shared ones (a region's write doorbell, rung by peers with ring()).
class WaitWord final : public Doorbell {
 public:
  WaitWord() noexcept : words_(&own_) {}
  explicit WaitWord(WakeWords* shared) noexcept : words_(shared), shared_(true) {}
  WaitWord(const WaitWord&) = delete;
  WaitWord& operator=(const WaitWord&) = delete;

  std::uint32_t epoch() const noexcept override { return words_->epoch.load(std::memory_order_acquire); }
  // Wakes every thread blocked on this word. Cheap when nobody sleeps.
  void notify_all() noexcept;
  // Sleeps while epoch() == seen, at most until `deadline` (and at most a
  // short slice, after which the caller tests its condition again).
  void block(std::uint32_t seen, Clock::time_point deadline) const noexcept override;

 private:
  WakeWords own_;
  WakeWords* words_;
  bool shared_ = false;
};

enum class WaitResult { Ready, Timeout, Aborted };

// Hooks a waiter may give: `progress` is called while spinning (drives a
// provider from the waiting thread); `before_block` is called once before the
// first sleep (e.g. to hand progress to a background engine); `spin`, when
// not negative, replaces spin_budget() for this wait (a caller that knows its
// process has a core to itself may spin longer).
struct WaitHooks {
  std::function<void()> progress;
  std::function<void()> before_block;
  std::chrono::microseconds spin{-1};
};

// Returns Ready as soon as ready() is true. `word` is what rings when ready()
// may have changed (a WaitWord, a region's write doorbell); it may be null,
// in which case the block phase sleeps in short slices and polls again.
WaitResult wait_until(const std::function<bool()>& ready, const Doorbell* word, Clock::time_point deadline,
                      const WaitHooks& hooks = {});

// Aborting makes every current and future wait return Aborted until
// clear_abort() (used by communicator abort and by tests of dead peers).
void abort_waits() noexcept;
void clear_abort() noexcept;
bool waits_aborted() noexcept;

inline Clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  return timeout.count() < 0 ? Clock::time_point::max() : Clock::now() + timeout;
}

}  // namespace rdmx::core
