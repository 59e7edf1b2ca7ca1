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

namespace rdmx::core {

using Clock = std::chrono::steady_clock;

// An event counter that blocked waiters sleep on.
class WaitWord {
 public:
  std::uint32_t epoch() const noexcept { return epoch_.load(std::memory_order_acquire); }
  // Wakes every thread blocked on this word. Cheap when nobody sleeps.
  void notify_all() noexcept;
  // Sleeps while epoch() == seen, at most until `deadline`.
  void block(std::uint32_t seen, Clock::time_point deadline) noexcept;

 private:
  std::atomic<std::uint32_t> epoch_{0};
  std::atomic<std::uint32_t> sleepers_{0};
};

enum class WaitResult { Ready, Timeout, Aborted };

// Hooks a waiter may give: `progress` is called while spinning (drives a
// provider from the waiting thread); `before_block` is called once before the
// first sleep (e.g. to hand progress to a background engine).
struct WaitHooks {
  std::function<void()> progress;
  std::function<void()> before_block;
};

// Returns Ready as soon as ready() is true. `word` may be null, in which case
// the block phase sleeps in short slices and polls again.
WaitResult wait_until(const std::function<bool()>& ready, WaitWord* word, Clock::time_point deadline,
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
