// SPDX-License-Identifier: MIT
#include "coll/executor.hpp"

#include "rdmx/profile.hpp"
#include "services/config.hpp"
#include "services/log.hpp"

namespace rdmx {

bool Work::test() {
  if (!state_) throw Error(ErrorCode::InvalidState, "test() on an empty Work handle", {.op = "Work::test"});
  const auto s = state_->status.load(std::memory_order_acquire);
  if (s == State::kFailed) std::rethrow_exception(state_->error);
  return s == State::kDone;
}

void Work::wait(std::chrono::milliseconds timeout) {
  if (!state_) throw Error(ErrorCode::InvalidState, "wait() on an empty Work handle", {.op = "Work::wait"});
  profile::waited(state_->profile_id);
  // Run it here if nobody has started it: no thread hop for a wait that
  // follows its call. Not under a bound shorter than the operation's own,
  // which running it could overstay.
  if (timeout.count() < 0 || timeout >= state_->timeout) {
    if (auto executor = state_->executor.lock()) executor->run_until(state_.get());
  }
  auto r = core::wait_until([&] { return state_->status.load(std::memory_order_acquire) != State::kPending; },
                            &state_->word, core::deadline_after(timeout));
  if (r != core::WaitResult::Ready) {
    throw Error(ErrorCode::Timeout, state_->what + " is still running after " + std::to_string(timeout.count()) + " ms",
                {.op = "Work::wait",
                 .hint = "the operation goes on and is bounded by its own timeout; wait again or "
                         "abort the communicator"});
  }
  test();
}

void Work::wait() { wait(state_ ? state_->timeout : core::timeout()); }

namespace coll {
namespace {

// How long a job posted to a sleeping worker is left for a waiter to claim.
// A wait that follows its call (torch's async_op=False path, a C++ i* call
// then wait()) comes within microseconds and then runs the job itself;
// without the grace the woken worker races it, and whichever loses adds a
// thread hop to the call. Work nobody waits for (DDP's buckets) starts this
// much later, far below its own duration.
constexpr auto kClaimGrace = std::chrono::microseconds(200);

}  // namespace

void Executor::post(Job job, const std::shared_ptr<Executor>& self) {
  job.state->executor = self;
  core::LockGuard lock(mutex_);
  if (stopping_) {
    job.state->finish(std::make_exception_ptr(Error(ErrorCode::InvalidState, "the communicator is being destroyed",
                                                    {.op = to_string(job.call.op), .rank = rank_})));
    return;
  }
  if (!worker_.joinable()) worker_ = std::thread([this] { serve(); });
  pending_.fetch_add(1, std::memory_order_acq_rel);
  // Only a sleeping worker needs the system call; a busy one looks at the
  // queue again when its job is done.
  const bool wake = worker_asleep_;
  if (wake) job.worker_from = std::chrono::steady_clock::now() + kClaimGrace;
  queue_.push_back(std::move(job));
  if (wake) wake_.notify_one();
}

bool Executor::take_locked(Job& job) {
  if (running_ || queue_.empty()) return false;
  job = std::move(queue_.front());
  queue_.pop_front();
  running_ = true;
  return true;
}

void Executor::complete(Job& job) {
  std::exception_ptr error;
  const std::thread::id outer = running_thread_.exchange(std::this_thread::get_id(), std::memory_order_acq_rel);
  try {
    if (job.task) {
      job.task();
    } else {
      run_(job);
    }
    if (job.call.then) job.call.then();
  } catch (...) {
    error = std::current_exception();
  }
  running_thread_.store(outer, std::memory_order_release);
  job.ticket.release();  // before the Work completes: its waiter may synchronize the stream next
  // Recorded before `done`, which may wake whoever waits on an adapter's
  // future (and ends a profiled training step).
  if (!error && job.state) profile::completed(job.state->profile_id);
  if (job.call.done) {
    try {
      job.call.done(error);
    } catch (const std::exception& e) {
      RDMX_WARN("rank %d: the completion hook of %s threw: %s", rank_, to_string(job.call.op), e.what());
    }
  }
  // The hooks hold the caller's buffers (tensors): they go before anyone
  // learns that the operation finished.
  job.call.then = nullptr;
  job.call.done = nullptr;
  job.task = nullptr;
  if (job.state) {
    // Counted down before the handle completes, so that a blocking call
    // made right after wait() returns runs inline.
    pending_.fetch_sub(1, std::memory_order_acq_rel);
    job.state->finish(error);
  } else if (error) {
    std::rethrow_exception(error);
  }
}

void Executor::run_until(const Work::State* target) {
  Job job;
  for (;;) {
    {
      core::LockGuard lock(mutex_);
      if (!target->pending() || !take_locked(job)) return;
    }
    complete(job);
    job = Job();
    core::LockGuard lock(mutex_);
    running_ = false;
    // The worker may have found the queue busy, or be stopping, and gone to sleep.
    if (!queue_.empty() || stopping_) wake_.notify_one();
  }
}

void Executor::serve() {
  core::UniqueLock lock(mutex_);
  for (;;) {
    Job job;
    if (!running_ && !stopping_ && !queue_.empty()) {
      const auto now = std::chrono::steady_clock::now();
      if (now < queue_.front().worker_from) {
        wake_.wait_for(lock, queue_.front().worker_from - now);
        continue;
      }
    }
    if (take_locked(job)) {
      lock.unlock();
      complete(job);
      job = Job();
      lock.lock();
      running_ = false;
      continue;
    }
    if (stopping_ && queue_.empty() && !running_) return;
    worker_asleep_ = true;
    wake_.wait(lock);
    worker_asleep_ = false;
  }
}

std::size_t Executor::drop(const std::string& reason) {
  std::deque<Job> dropped;
  {
    core::LockGuard lock(mutex_);
    dropped.swap(queue_);
  }
  pending_.fetch_sub(static_cast<std::uint32_t>(dropped.size()), std::memory_order_acq_rel);
  for (auto& job : dropped) {
    auto error = std::make_exception_ptr(Error(ErrorCode::InvalidState,
                                               "the communicator was aborted before this operation started: " + reason,
                                               {.op = to_string(job.call.op), .rank = rank_}));
    if (job.call.done) job.call.done(error);
    job.call = Call();
    job.state->finish(error);
  }
  return dropped.size();
}

void Executor::stop() {
  std::thread worker;
  {
    core::LockGuard lock(mutex_);
    stopping_ = true;
    worker.swap(worker_);
  }
  wake_.notify_all();
  if (worker.joinable()) worker.join();
}

}  // namespace coll
}  // namespace rdmx
