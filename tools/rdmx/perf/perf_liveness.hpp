// SPDX-License-Identifier: MIT
// Waits of `rdmx perf p2p` bounded by silence, not by a whole run: a
// bandwidth test may stream for minutes while RDMX_TIMEOUT is seconds, and a
// passive rank sees nothing of one-sided traffic, so rank 0 shows progress
// through a store counter (Heartbeat) that the waiting side consults before
// it gives up.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "rdmx/bootstrap.hpp"
#include "rdmx/verbs.hpp"

namespace rdmx::cli {

// A spinning wait's bound. The clock is read only once a wait has lasted a
// while, so the fast path of a ping-pong costs no time stamps; at the same
// cadence the QP is checked, so a dead peer ends the wait at once rather than
// at the timeout. progressed() restarts the count when something arrives; a
// probe (Heartbeat::probe) may extend it when the peer shows progress.
class SpinBudget {
 public:
  using Clock = std::chrono::steady_clock;
  SpinBudget(const QueuePair& qp, std::chrono::milliseconds timeout, const char* what,
             std::function<bool()> peer_progressed = {})
      : qp_(qp), timeout_(timeout), what_(what), peer_progressed_(std::move(peer_progressed)) {}
  void tick() {
    if ((++spins_ & 0xfff) != 0) return;
    slow_tick();
  }
  // Something arrived: the timeout counts from now.
  void progressed() { started_ = false; }

 private:
  void slow_tick();

  const QueuePair& qp_;
  std::chrono::milliseconds timeout_;
  const char* what_;
  std::function<bool()> peer_progressed_;
  std::uint64_t spins_ = 0;
  bool started_ = false;
  Clock::time_point deadline_{};
};

// Rank 0 bumps a store counter every quarter timeout while it streams; the
// other rank reads it when a wait runs out, and waits on while it moved.
class Heartbeat {
 public:
  using Clock = std::chrono::steady_clock;
  Heartbeat(Store& store, int rank, int peer, std::chrono::milliseconds timeout);

  // Between operations: a store write per quarter timeout at most.
  void beat(Clock::time_point now) {
    if (now >= next_beat_) beat_now(now);
  }
  // Whether the peer's counter moved since the last call.
  bool peer_progressed();
  std::function<bool()> probe() {
    return [this] { return peer_progressed(); };
  }
  // One completion, sleeping rather than spinning, for as long as the peer
  // shows progress; Error(Timeout) after a whole timeout of silence.
  void wait_completion(CompletionQueue& cq, const QueuePair& qp, WorkCompletion& wc, const char* what);
  // A store key, likewise.
  void wait_key(const std::string& key);

 private:
  void beat_now(Clock::time_point now);

  Store& store_;
  std::string mine_, theirs_;
  int peer_;
  std::chrono::milliseconds timeout_;
  Clock::time_point next_beat_{};
  std::int64_t seen_ = -1;
};

}  // namespace rdmx::cli
