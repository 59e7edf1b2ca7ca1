// SPDX-License-Identifier: MIT
// How a device's background progress engine stays out of the way of an
// application thread that drives progress itself (progress(), CQ polls and
// waits, posting): it parks while that thread keeps calling, and takes over
// at once when the thread is about to sleep (application_idle) or after it
// stops calling for a park period.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "services/wait.hpp"

namespace rdmx::core {

class EngineParking {
 public:
  // How long the engine stays parked after it saw an application thread
  // drive progress. It re-checks after each period, doubling the period while
  // the application keeps driving: the worst delay before it serves a peer
  // after the application stops is the longest period, and a busy
  // application is interrupted about a hundred times a second, not thousands.
  static constexpr std::chrono::microseconds kMinPark{500};
  static constexpr std::chrono::microseconds kMaxPark{8000};

  // Application side. Only "has it changed" matters, so a plain store
  // suffices (no locked read-modify-write on the hot path).
  void note_application_activity() noexcept {
    calls_.store(calls_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  // The application thread is about to sleep: the engine takes over now.
  void application_idle() noexcept {
    app_sleeping_.store(true, std::memory_order_relaxed);
    word_.notify_all();
  }
  // Ends a park early (the device is stopping).
  void wake() noexcept { word_.notify_all(); }

  // Engine side, from one thread: when an application thread drove progress
  // since the last call and is not asleep, blocks for the park period and
  // returns true; otherwise returns false and the engine does a pass.
  bool park_while_application_drives() noexcept {
    const std::uint64_t calls = calls_.load(std::memory_order_relaxed);
    const bool driven = calls != seen_calls_ && !app_sleeping_.exchange(false, std::memory_order_relaxed);
    seen_calls_ = calls;
    if (!driven) {
      park_ = kMinPark;
      return false;
    }
    const std::uint32_t epoch = word_.epoch();
    word_.block(epoch, Clock::now() + park_);
    park_ = std::min(park_ * 2, kMaxPark);
    return true;
  }

 private:
  std::atomic<std::uint64_t> calls_{0};
  std::atomic<bool> app_sleeping_{false};
  WaitWord word_;
  std::uint64_t seen_calls_ = 0;  // engine thread only
  std::chrono::microseconds park_ = kMinPark;
};

}  // namespace rdmx::core
