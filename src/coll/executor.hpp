// SPDX-License-Identifier: MIT
// The communicator's one executor. Operations run one at a time in call
// order (what matching them across ranks needs). Who runs one: the caller
// of a blocking operation with nothing queued before it; otherwise the
// first of the thread that waits for it (Work::wait claims the queue up to
// it, so a wait right after an asynchronous call costs no thread hop) and
// the communicator's worker thread (so asynchronous work goes on while the
// caller computes).
#pragma once

#include <atomic>
#include <deque>
#include <exception>
#include <memory>
#include <string>
#include <thread>

#include "coll/communicator_internal.hpp"
#include "coll/cuda/stream_order.hpp"
#include "rdmx/comm.hpp"
#include "services/mutex.hpp"
#include "services/wait.hpp"

namespace rdmx {

struct Work::State {
  enum : std::uint32_t { kPending = 0, kDone = 1, kFailed = 2 };
  std::atomic<std::uint32_t> status{kPending};
  std::exception_ptr error;
  core::WaitWord word;
  std::chrono::milliseconds timeout{0};
  std::string what;                        // for the Timeout message
  std::uint64_t profile_id = 0;            // rdmx/profile.hpp's record of it, or 0
  std::weak_ptr<coll::Executor> executor;  // where a waiter may run it; gone with the communicator

  bool pending() const noexcept { return status.load(std::memory_order_acquire) == kPending; }
  void finish(std::exception_ptr e) {
    error = std::move(e);
    status.store(error ? kFailed : kDone, std::memory_order_release);
    word.notify_all();
  }
};

namespace coll {

class Executor {
 public:
  struct Job {
    Call call;
    int gpu = -1;         // the GPU holding its buffers, or -1
    StreamTicket ticket;  // ordering on the caller's CUDA stream, if any
    std::shared_ptr<Work::State> state;
    std::function<void()> task;  // CommunicatorCore::submit_task's function instead of `call`
    // Posted to a sleeping worker: it leaves the job to a waiter until then.
    std::chrono::steady_clock::time_point worker_from{};
  };
  // Runs a job's operation (throws its error).
  using Runner = std::function<void(Job&)>;

  Executor(int rank, Runner run) : rank_(rank), run_(std::move(run)) {}
  ~Executor() { stop(); }
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // True while nothing is queued or running: a blocking call may run inline.
  bool idle() const noexcept { return pending_.load(std::memory_order_acquire) == 0; }
  // True on the thread running a job: the blocking calls a task makes run
  // inline there (they are part of it).
  bool runs_here() const noexcept {
    return running_thread_.load(std::memory_order_acquire) == std::this_thread::get_id();
  }
  // Queues `job`; its state learns where it is queued (`self` is this executor).
  void post(Job job, const std::shared_ptr<Executor>& self);
  // On a waiter's thread: runs queued jobs in order until `target` has
  // finished, unless another thread is running one (then the caller waits).
  void run_until(const Work::State* target);
  // Runs a job's operation, then its `then` and `done` hooks, then completes
  // its state; on whichever thread runs it (the inline path included).
  void complete(Job& job);
  // Fails every queued job with `reason` (abort); returns how many.
  std::size_t drop(const std::string& reason);
  // Lets the worker finish what is queued, then joins it.
  void stop();

 private:
  void serve();
  // Takes the next job for this thread, or false when another runs one or none is queued.
  bool take_locked(Job& job) RDMX_REQUIRES(mutex_);

  const int rank_;
  Runner run_;
  core::Mutex mutex_;
  core::ConditionVariable wake_;  // the worker: a job queued, the running one done, or stop
  std::deque<Job> queue_ RDMX_GUARDED_BY(mutex_);
  bool running_ RDMX_GUARDED_BY(mutex_) = false;
  bool stopping_ RDMX_GUARDED_BY(mutex_) = false;
  bool worker_asleep_ RDMX_GUARDED_BY(mutex_) = false;
  std::thread worker_ RDMX_GUARDED_BY(mutex_);
  std::atomic<std::uint32_t> pending_{0};  // queued or running
  std::atomic<std::thread::id> running_thread_{};
};

}  // namespace coll
}  // namespace rdmx
