// SPDX-License-Identifier: MIT
// The completion queue every provider uses: a bounded ring filled by the
// provider's progress engine and drained by poll()/wait(). A full ring turns
// into an overflowed CQ, which every later call reports, so a completion is
// never lost silently.
#pragma once

#include <atomic>
#include <functional>
#include <vector>

#include "rdmx/verbs.hpp"
#include "services/mutex.hpp"
#include "services/wait.hpp"

namespace rdmx::core {

class CompletionRing final : public CompletionQueue {
 public:
  struct Hooks {
    std::function<std::size_t()> progress;  // drives the owning device from the caller
    std::function<void()> idle;             // the caller is about to sleep
  };
  CompletionRing(std::size_t depth, Hooks hooks);

  std::size_t depth() const noexcept override { return ring_.size(); }
  std::size_t poll(std::span<WorkCompletion> out) override;
  std::size_t wait(std::span<WorkCompletion> out, std::chrono::milliseconds timeout) override;
  using CompletionQueue::wait;

  // Provider side. Returns false when the ring was full: the CQ is then
  // overflowed and the caller must move its QP to ERROR.
  bool push(const WorkCompletion& wc);
  bool overflowed() const noexcept { return overflowed_.load(std::memory_order_acquire); }

 private:
  std::size_t take_locked(std::span<WorkCompletion> out) RDMX_REQUIRES(mutex_);
  void throw_if_overflowed() const;

  Mutex mutex_;
  std::vector<WorkCompletion> ring_;
  std::size_t head_ RDMX_GUARDED_BY(mutex_) = 0;
  std::atomic<std::size_t> count_{0};
  std::atomic<bool> overflowed_{false};
  WaitWord word_;
  Hooks hooks_;
};

}  // namespace rdmx::core
