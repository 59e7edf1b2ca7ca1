// SPDX-License-Identifier: MIT
#include "driver/completion_queue.hpp"

#include "services/log.hpp"

namespace rdmx::core {

CompletionRing::CompletionRing(std::size_t depth, Hooks hooks, ParentHold device)
    : ring_(depth), hooks_(std::move(hooks)), device_(std::move(device)) {
  if (depth == 0 || depth > (1u << 24)) {
    throw Error(ErrorCode::InvalidArgument, "completion queue depth must be between 1 and 16M",
                {.op = "create_cq", .sizes = "depth=" + std::to_string(depth), .hint = "use e.g. 1024"});
  }
}

void CompletionRing::throw_if_overflowed() const {
  if (overflowed()) {
    throw Error(ErrorCode::QueueFull, "completion queue overflowed: a completion arrived while it was full",
                {.op = "poll_cq",
                 .sizes = "depth=" + std::to_string(ring_.size()),
                 .hint = "create the CQ with depth >= the send and receive work the QPs using it can have "
                         "outstanding, and poll it often; the QPs using it were moved to ERROR"});
  }
}

bool CompletionRing::push(const WorkCompletion& wc) {
  {
    LockGuard lock(mutex_);
    std::size_t count = count_.load(std::memory_order_relaxed);
    if (count == ring_.size()) {
      if (!overflowed_.exchange(true)) {
        RDMX_WARN("completion queue (depth %zu) overflowed; wr_id=%llu status=%s lost its slot", ring_.size(),
                  static_cast<unsigned long long>(wc.wr_id), to_string(wc.status));
      }
      word_.notify_all();
      return false;
    }
    ring_[(head_ + count) % ring_.size()] = wc;
    count_.store(count + 1, std::memory_order_release);
  }
  word_.notify_all();
  return true;
}

std::size_t CompletionRing::take_locked(std::span<WorkCompletion> out) {
  std::size_t count = count_.load(std::memory_order_relaxed);
  std::size_t n = std::min(count, out.size());
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = ring_[head_];
    head_ = (head_ + 1) % ring_.size();
  }
  count_.store(count - n, std::memory_order_release);
  return n;
}

std::size_t CompletionRing::poll(std::span<WorkCompletion> out) {
  throw_if_overflowed();
  if (count_.load(std::memory_order_acquire) == 0 && hooks_.progress) {
    hooks_.progress();
    // Progress run from here may have overflowed the ring (providers that
    // move completions only when asked): report it now, not on the next call.
    throw_if_overflowed();
  }
  if (count_.load(std::memory_order_acquire) == 0 || out.empty()) {
    throw_if_overflowed();
    return 0;
  }
  LockGuard lock(mutex_);
  return take_locked(out);
}

std::size_t CompletionRing::wait(std::span<WorkCompletion> out, std::chrono::milliseconds timeout) {
  if (out.empty()) {
    throw Error(ErrorCode::InvalidArgument, "wait needs room for at least one completion", {.op = "cq.wait"});
  }
  std::size_t got = 0;
  WaitHooks hooks;
  if (hooks_.progress) hooks.progress = [this] { hooks_.progress(); };
  if (hooks_.idle) hooks.before_block = hooks_.idle;
  auto result = wait_until(
      [&] {
        if (overflowed() || count_.load(std::memory_order_acquire) == 0) return overflowed();
        LockGuard lock(mutex_);
        got = take_locked(out);
        return got > 0;
      },
      &word_, deadline_after(timeout), hooks);
  throw_if_overflowed();
  if (result == WaitResult::Timeout) {
    throw Error(ErrorCode::Timeout, "no completion arrived in time",
                {.op = "cq.wait",
                 .sizes = "timeout_ms=" + std::to_string(timeout.count()),
                 .hint = "check that the peer is alive and that work was posted; raise RDMX_TIMEOUT if the "
                         "operation is legitimately slow"});
  }
  if (result == WaitResult::Aborted) {
    throw Error(ErrorCode::InvalidState, "wait aborted", {.op = "cq.wait", .hint = "rdmx waits were aborted"});
  }
  return got;
}

}  // namespace rdmx::core
