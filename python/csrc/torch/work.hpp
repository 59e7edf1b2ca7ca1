// SPDX-License-Identifier: MIT
// What a backend call returns: torch's Work over the Communicator's. The
// Communicator runs the operation; the call's `done` hook, on whichever
// thread ran it, records the outcome here and completes the future (with
// the output tensors, or the error) that DDP and communication hooks chain
// on. No queue and no thread of its own.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <exception>
#include <vector>

#include "rdmx/comm.hpp"

namespace rdmx::torch_backend {

// rdmx's error as torch 2.x raises a backend's: an argument error as
// c10::Error (RuntimeError in Python), anything else (timeout, mismatched
// collectives, a dead peer) as c10::DistBackendError
// (torch.distributed.DistBackendError), each with rdmx's whole message.
std::exception_ptr torch_error(std::exception_ptr error);

class RdmxWork : public c10d::Work {
 public:
  // `devices`: the CUDA device of a CUDA operation, whose future is then
  // CUDA-aware as torch's NCCL backend's is (its callbacks run on streams
  // that wait for it); empty for CPU.
  RdmxWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, std::vector<c10::Device> devices = {});

  // Waits for the operation (running it on this thread if nobody has
  // started it), bounded by `timeout` when positive, else by the group's
  // timeout; rethrows its error as torch_error() made it. rdmx runs
  // operations on the host, and a CUDA operation's device work (its copies
  // included) has run when it completes, so this blocks the host as NCCL's
  // blocking wait does: any stream's later work sees the results.
  bool wait(std::chrono::milliseconds timeout) override;
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // The call's `done` hook.
  void complete(std::exception_ptr error);
  // The Communicator's handle, before the caller sees this Work.
  void attach(rdmx::Work work) { work_ = std::move(work); }
  const rdmx::Work& handle() const { return work_; }

 private:
  rdmx::Work work_;  // empty when the operation ran at the call
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace rdmx::torch_backend
