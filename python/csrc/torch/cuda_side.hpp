// SPDX-License-Identifier: MIT
// What CUDA tensors need beyond the Communicator's ordering on the caller's
// stream (Communicator::set_cuda_stream):
// - torch copies the backend makes while an operation runs (results out of a
//   staging buffer, tagged messages) go to a stream of the backend's own,
//   which nothing else queues on, and are finished (host-synchronized)
//   before the operation completes. The caller's stream cannot take them: it
//   is held by the operation's wait until the operation completes, and work
//   queued on it after the call would run before them. Once an operation
//   completes, no device work of it is pending, so holding its tensors until
//   then keeps the caching allocator from reusing their memory early.
// - tasks (tagged messages) are host functions: a mark recorded at the call
//   on the tensors' current streams tells them when their inputs are written.
// Without CUDA (a CPU build of torch) these are no-ops.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <chrono>
#include <functional>
#include <optional>
#include <vector>

namespace rdmx::torch_backend {

// The backend's own stream on `device` (a CUDA device), made on first use.
c10::Stream side_stream(c10::Device device);
// Runs `fn` with `side` as its device's current stream; with `settle`, then
// waits until what `fn` queued there has run.
void on_stream(const std::optional<c10::Stream>& side, const std::function<void()>& fn, bool settle);
// Waits until the work queued so far on the current stream of `t`'s device
// has run (nothing for a CPU tensor): the backend's copies that a
// communicator call reads, or that must land before a Work completes.
void settle(const at::Tensor& t);
// The first CUDA device among `tensors`, if any.
std::optional<c10::Device> cuda_device_of(const std::vector<at::Tensor>& tensors);

// The work queued on the current streams of some CUDA devices at a call.
class StreamMark {
 public:
  // Records an event on the current stream of each CUDA device of `tensors`.
  explicit StreamMark(const std::vector<at::Tensor>& tensors);
  bool empty() const { return events_.empty(); }
  // Waits for that work, bounded by `timeout`; throws rdmx::Error(Timeout)
  // naming `op` when it has not run by then.
  void wait(std::chrono::milliseconds timeout, const char* op, int rank) const;

 private:
  std::vector<c10::Event> events_;
};

}  // namespace rdmx::torch_backend
