// SPDX-License-Identifier: MIT
// How the backend's operations run and complete: each call becomes a task
// on the group's one executor thread, in call order (what matching
// collectives needs), and a Work whose wait(), is_completed() and
// get_future() behave as Gloo's, so DDP and its communication hooks work.
#pragma once

#include <ATen/core/ivalue.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "compat.hpp"

namespace rdmx::torch_backend {

class RdmxWork : public c10d::Work {
 public:
  RdmxWork(int rank, c10d::OpType type, std::string what, std::vector<at::Tensor> outputs);

  // Waits until the task has run; rethrows its error (a RuntimeError in
  // Python carrying rdmx's message). A positive timeout bounds the wait.
  bool wait(std::chrono::milliseconds timeout) override;
  std::vector<at::Tensor> result() override { return outputs_; }
  // Completed with the output tensors (a list), or the task's error.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // From the executor: records the outcome, wakes waiters, runs the future's callbacks.
  void complete(std::exception_ptr error);

 private:
  std::string what_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class Executor {
 public:
  explicit Executor(int rank);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  void post(c10::intrusive_ptr<RdmxWork> work, std::function<void()> body);
  // Runs what is queued, then joins the thread; later posts fail at once.
  void stop();

 private:
  struct Task {
    c10::intrusive_ptr<RdmxWork> work;
    std::function<void()> body;
  };
  void run();

  int rank_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace rdmx::torch_backend
