// SPDX-License-Identifier: MIT
// The completion queue every provider uses: a bounded ring filled by the
// provider's progress engine and drained by poll()/wait(). A full ring turns
// into an overflowed CQ, which every later call reports, so a completion is
// never lost silently. The ring is the CQ's state: the user's CompletionQueue
// (CqHandle) and every QP that completes into it hold it, so destroying the
// CQ before its QPs is safe (driver/lifetime.hpp).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "driver/lifetime.hpp"
#include "rdmx/verbs.hpp"
#include "services/mutex.hpp"
#include "services/wait.hpp"

namespace rdmx::core {

class CompletionRing final {
 public:
  struct Hooks {
    std::function<std::size_t()> progress;  // drives the owning device from the caller
    std::function<void()> idle;             // the caller is about to sleep
  };
  // `device`: the hold on the device whose progress the hooks drive.
  CompletionRing(std::size_t depth, Hooks hooks, ParentHold device = {});

  std::size_t depth() const noexcept { return ring_.size(); }
  std::size_t poll(std::span<WorkCompletion> out);
  std::size_t wait(std::span<WorkCompletion> out, std::chrono::milliseconds timeout);
  // The QPs that complete into this ring.
  Children& children() noexcept { return children_; }

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
  Children children_;
  ParentHold device_;
};

// What create_cq() returns: the user's handle on a ring its QPs hold too.
class CqHandle final : public CompletionQueue {
 public:
  explicit CqHandle(std::shared_ptr<CompletionRing> ring) : ring_(std::move(ring)) {}
  ~CqHandle() override { warn_destroyed_with_children("completion queue", ring_->children()); }
  CqHandle(const CqHandle&) = delete;
  CqHandle& operator=(const CqHandle&) = delete;

  std::size_t depth() const noexcept override { return ring_->depth(); }
  LiveChildren live_children() const override { return ring_->children().live(); }
  std::size_t poll(std::span<WorkCompletion> out) override { return ring_->poll(out); }
  std::size_t wait(std::span<WorkCompletion> out, std::chrono::milliseconds timeout) override {
    return ring_->wait(out, timeout);
  }
  using CompletionQueue::wait;

  const std::shared_ptr<CompletionRing>& ring() const noexcept { return ring_; }

 private:
  std::shared_ptr<CompletionRing> ring_;
};

}  // namespace rdmx::core
