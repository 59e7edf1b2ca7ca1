// SPDX-License-Identifier: MIT
#include "work.hpp"

#include <ATen/core/jit_type.h>
#include <c10/core/GradMode.h>

#include "rdmx/error.hpp"

namespace rdmx::torch_backend {

RdmxWork::RdmxWork(int rank, c10d::OpType type, std::string what, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type),
      what_(std::move(what)),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

bool RdmxWork::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (timeout > std::chrono::milliseconds(0)) {
    if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
      throw Error(ErrorCode::Timeout,
                  what_ + " is still running after " + std::to_string(timeout.count()) + " ms",
                  {.op = "Work.wait", .rank = rank_,
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
  finish(error);
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

Executor::Executor(int rank) : rank_(rank), thread_([this] { run(); }) {}

Executor::~Executor() { stop(); }

void Executor::post(c10::intrusive_ptr<RdmxWork> work, std::function<void()> body) {
  {
    std::lock_guard lock(mutex_);
    if (!stopping_) {
      queue_.push_back(Task{std::move(work), std::move(body)});
      ready_.notify_one();
      return;
    }
  }
  work->complete(std::make_exception_ptr(
      Error(ErrorCode::InvalidState, "the rdmx process group is being destroyed", {.op = "post", .rank = rank_})));
}

void Executor::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Executor::run() {
  // Tasks copy into and out of user tensors, which may require grad.
  c10::AutoGradMode no_grad(false);
  std::unique_lock lock(mutex_);
  for (;;) {
    ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;
    Task task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    std::exception_ptr error;
    try {
      task.body();
    } catch (...) {
      error = std::current_exception();
    }
    task.body = nullptr;  // drops the tensors it holds before the work completes
    task.work->complete(error);
    lock.lock();
  }
}

}  // namespace rdmx::torch_backend
