// SPDX-License-Identifier: MIT
// How the backend's operations run and complete. Each call becomes a task
// in the group's queue, run one at a time in call order (what matching
// collectives needs), and a Work whose wait(), is_completed() and
// get_future() behave as Gloo's, so DDP and its communication hooks work.
//
// Who runs a task: the thread that waits for its Work, when it waits before
// the group's thread has started it (a blocking call, async_op=False, runs
// on the caller's thread, as `rdmx perf coll` does, with no thread hop);
// otherwise the group's thread, which takes tasks nobody has claimed for
// 200 us (async_op=True, and DDP's buckets, go on while Python computes).
#pragma once

#include <ATen/core/ivalue.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "compat.hpp"

namespace rdmx::torch_backend {

class TaskQueue;

class RdmxWork : public c10d::Work {
 public:
  RdmxWork(int rank, c10d::OpType type, std::string what, std::vector<at::Tensor> outputs,
           std::uint64_t profile_id = 0);

  // Waits until the task has run, running it (and the tasks queued before
  // it) on this thread if nobody has started them; rethrows its error (a
  // RuntimeError in Python carrying rdmx's message). A positive timeout
  // bounds the wait and leaves the running to the group's thread.
  bool wait(std::chrono::milliseconds timeout) override;
  std::vector<at::Tensor> result() override { return outputs_; }
  // Completed with the output tensors (a list), or the task's error.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // Records the outcome, wakes waiters, runs the future's callbacks.
  void complete(std::exception_ptr error);
  void attach(const std::shared_ptr<TaskQueue>& queue) { queue_ = queue; }

 private:
  std::string what_;
  std::uint64_t profile_id_;  // rdmx/profile.hpp's record, or 0
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::weak_ptr<TaskQueue> queue_;  // gone with the group, after every task has completed
};

// The group's tasks, and the thread that runs those nobody waits for.
class Executor {
 public:
  explicit Executor(int rank);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  void post(const c10::intrusive_ptr<RdmxWork>& work, std::function<void()> body);
  // Runs what is queued, then joins the thread; later posts fail at once.
  void stop();

 private:
  void run();

  std::shared_ptr<TaskQueue> queue_;
  std::thread thread_;
};

}  // namespace rdmx::torch_backend
