// SPDX-License-Identifier: MIT
// The lock of a device's progress state, taken by every progress pass (an
// application thread spinning on progress() takes it millions of times a
// second) and rarely contended. Acquiring is one compare-and-swap; releasing
// is a plain store, not a second locked instruction as pthread's unlock. The
// price: a waiter that registers just as the holder releases may miss its
// wake-up, so waiters sleep at most kWaiterSlice before they look again.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "services/thread_annotations.hpp"

namespace rdmx::core {

class RDMX_CAPABILITY("device lock") DeviceLock {
 public:
  static constexpr auto kWaiterSlice = std::chrono::microseconds(50);

  bool try_lock() noexcept RDMX_TRY_ACQUIRE(true) {
    std::uint32_t expected = 0;
    return state_.load(std::memory_order_relaxed) == 0 &&
           state_.compare_exchange_strong(expected, 1, std::memory_order_acquire, std::memory_order_relaxed);
  }
  void lock() noexcept RDMX_ACQUIRE() {
    if (try_lock()) return;
    lock_slow();
  }
  void unlock() noexcept RDMX_RELEASE() {
    state_.store(0, std::memory_order_release);
    if (waiters_.load(std::memory_order_relaxed) != 0) wake_one();
  }

 private:
  // The analysis cannot follow a lock taken by a try_lock() loop.
  void lock_slow() noexcept RDMX_ACQUIRE() RDMX_NO_THREAD_SAFETY_ANALYSIS;
  void wake_one() noexcept;

  std::atomic<std::uint32_t> state_{0};  // 0 free, 1 held
  std::atomic<std::uint32_t> waiters_{0};
};

}  // namespace rdmx::core
