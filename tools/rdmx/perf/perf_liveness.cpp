// SPDX-License-Identifier: MIT
#include "perf/perf_liveness.hpp"

#include <algorithm>
#include <span>

#include "rdmx/error.hpp"

namespace rdmx::cli {

void SpinBudget::slow_tick() {
  if (qp_.state() == QpState::Error) {
    throw Error(ErrorCode::PeerFailure,
                std::string("queue pair failed while waiting for ") + what_ + ": " + qp_.error_reason(),
                {.op = "perf p2p", .hint = "the other rank's output says why"});
  }
  const auto now = Clock::now();
  if (!started_) {
    deadline_ = now + timeout_;
    started_ = true;
  } else if (now > deadline_) {
    if (peer_progressed_ && peer_progressed_()) {
      deadline_ = now + timeout_;
      return;
    }
    throw Error(ErrorCode::Timeout,
                std::string("gave up waiting for ") + what_ + ": nothing arrived and the peer showed no progress for " +
                    std::to_string(timeout_.count()) + " ms",
                {.op = "perf p2p", .hint = "is the peer alive? its output says why; raise --timeout or RDMX_TIMEOUT"});
  }
}

Heartbeat::Heartbeat(Store& store, int rank, int peer, std::chrono::milliseconds timeout)
    : store_(store),
      mine_("perf_p2p/alive/" + std::to_string(rank)),
      theirs_("perf_p2p/alive/" + std::to_string(peer)),
      peer_(peer),
      timeout_(timeout) {}

void Heartbeat::beat_now(Clock::time_point now) {
  next_beat_ = now + std::max<std::chrono::milliseconds>(timeout_ / 4, std::chrono::milliseconds(10));
  store_.add(mine_, 1);
}

bool Heartbeat::peer_progressed() {
  const std::int64_t beats = store_.add(theirs_, 0);
  const bool moved = beats != seen_;
  seen_ = beats;
  return moved;
}

void Heartbeat::wait_completion(CompletionQueue& cq, const QueuePair& qp, WorkCompletion& wc, const char* what) {
  peer_progressed();  // the baseline the first silent timeout compares with
  for (;;) {
    try {
      cq.wait(std::span(&wc, 1), timeout_);
      return;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout || qp.state() == QpState::Error) throw;
      if (!peer_progressed()) {
        throw Error(ErrorCode::Timeout,
                    std::string("gave up waiting for ") + what + ": nothing arrived and rank " + std::to_string(peer_) +
                        " showed no progress for " + std::to_string(timeout_.count()) + " ms",
                    {.op = "perf p2p",
                     .peer_rank = peer_,
                     .hint = "is the peer alive? its output says why; raise --timeout or RDMX_TIMEOUT"});
      }
    }
  }
}

void Heartbeat::wait_key(const std::string& key) {
  peer_progressed();
  for (;;) {
    try {
      store_.wait({key}, timeout_);
      return;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout || !peer_progressed()) throw;
    }
  }
}

}  // namespace rdmx::cli
