// SPDX-License-Identifier: MIT
#include "work.hpp"

#include <ATen/core/jit_type.h>
#include <c10/core/GradMode.h>

#include <chrono>

#include "rdmx/error.hpp"
#include "rdmx/profile.hpp"

namespace rdmx::torch_backend {
namespace {

using Clock = std::chrono::steady_clock;

// How long a queued task waits for a caller to run it before the group's
// thread may. A blocking call reaches Work.wait() within microseconds of
// queuing; async work starts at most a poll later, far below a DDP
// bucket's all-reduce time.
constexpr auto kGrace = std::chrono::microseconds(200);
// While the group is in use its thread looks at the queue this often, so
// that queuing costs the caller no system call: on a VM, arming a timer or
// waking a thread per call can cost more than a small collective
// (docs/PERFORMANCE.md, "How the backend runs a call").
constexpr auto kPoll = std::chrono::milliseconds(1);
// After this many empty polls the thread sleeps until the next task is queued.
constexpr int kPollsBeforeSleeping = 2000;

}  // namespace

// The tasks of one group, shared by the group's thread and its Works.
class TaskQueue {
 public:
  explicit TaskQueue(int rank) : rank_(rank) {}

  struct Task {
    c10::intrusive_ptr<RdmxWork> work;
    std::function<void()> body;
    Clock::time_point queued;
  };

  // False once stopping.
  bool push(Task task) {
    std::lock_guard lock(mutex_);
    if (stopping_) return false;
    task.queued = Clock::now();
    tasks_.push_back(std::move(task));
    if (thread_asleep_) wake_.notify_one();
    return true;
  }

  // A caller's wait: runs queued tasks in order, one at a time, until `work` has completed.
  void run_until(RdmxWork* work) {
    std::unique_lock lock(mutex_);
    while (!work->isCompleted()) {
      if (running_) {
        idle_.wait(lock);
      } else if (tasks_.empty()) {
        return;  // `work` completed between the checks
      } else {
        run_front(lock);
      }
    }
  }

  // The group's thread: returns once stopped and drained.
  void serve() {
    std::unique_lock lock(mutex_);
    int empty_polls = 0;
    for (;;) {
      if (!running_ && !tasks_.empty() && (stopping_ || Clock::now() - tasks_.front().queued >= kGrace)) {
        run_front(lock);
        empty_polls = 0;
        continue;
      }
      if (tasks_.empty() && !running_ && stopping_) return;
      if (tasks_.empty() && ++empty_polls > kPollsBeforeSleeping) {
        thread_asleep_ = true;
        wake_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
        thread_asleep_ = false;
        empty_polls = 0;
        continue;
      }
      wake_.wait_for(lock, kPoll);
    }
  }

  void stop() {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    wake_.notify_all();
  }

  int rank() const { return rank_; }

 private:
  void run_front(std::unique_lock<std::mutex>& lock) {
    Task task = std::move(tasks_.front());
    tasks_.pop_front();
    running_ = true;
    lock.unlock();
    // Tasks copy into and out of user tensors, which may require grad.
    c10::AutoGradMode no_grad(false);
    std::exception_ptr error;
    try {
      task.body();
    } catch (...) {
      error = std::current_exception();
    }
    task.body = nullptr;  // drops the tensors it holds before the work completes
    task.work->complete(error);
    lock.lock();
    running_ = false;
    idle_.notify_all();
  }

  int rank_;
  std::mutex mutex_;
  std::condition_variable wake_;  // the group's thread: a task after a long idle spell, or stop
  std::condition_variable idle_;  // waiters: a task finished, the next may start
  std::deque<Task> tasks_;
  bool running_ = false;
  bool stopping_ = false;
  bool thread_asleep_ = false;
};

RdmxWork::RdmxWork(int rank, c10d::OpType type, std::string what, std::vector<at::Tensor> outputs,
                   std::uint64_t profile_id)
    : c10d::Work(rank, type),
      what_(std::move(what)),
      profile_id_(profile_id),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

bool RdmxWork::wait(std::chrono::milliseconds timeout) {
  profile::waited(profile_id_);
  if (timeout <= std::chrono::milliseconds(0)) {
    if (auto queue = queue_.lock()) queue->run_until(this);
  }
  std::unique_lock lock(mutex_);
  if (timeout > std::chrono::milliseconds(0)) {
    if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
      throw Error(ErrorCode::Timeout, what_ + " is still running after " + std::to_string(timeout.count()) + " ms",
                  {.op = "Work.wait",
                   .rank = rank_,
                   .hint = "the operation goes on, bounded by the group's timeout; wait again to see its outcome"});
    }
  } else {
    // Unbounded here because every task is: each rdmx call in it fails by
    // the group's timeout at the latest.
    cv_.wait(lock, [&] { return completed_; });
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

void RdmxWork::complete(std::exception_ptr error) {
  if (!error) profile::completed(profile_id_);
  finish(error);
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

Executor::Executor(int rank) : queue_(std::make_shared<TaskQueue>(rank)), thread_([this] { run(); }) {}

Executor::~Executor() { stop(); }

void Executor::post(const c10::intrusive_ptr<RdmxWork>& work, std::function<void()> body) {
  work->attach(queue_);
  if (queue_->push(TaskQueue::Task{work, std::move(body), {}})) return;
  work->complete(std::make_exception_ptr(Error(ErrorCode::InvalidState, "the rdmx process group is being destroyed",
                                               {.op = "post", .rank = queue_->rank()})));
}

void Executor::stop() {
  queue_->stop();
  if (thread_.joinable()) thread_.join();
}

void Executor::run() { queue_->serve(); }

}  // namespace rdmx::torch_backend
