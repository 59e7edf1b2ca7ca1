// SPDX-License-Identifier: MIT
// Operations ordered on a caller's CUDA stream (Communicator::
// set_cuda_stream), as NCCL's are, while rdmx runs them on the host:
// - at the call, an event recorded on the stream marks the work queued
//   before it, which the operation waits for before touching its buffers;
// - a wait queued on the stream holds the work queued after the call until
//   the operation releases it, by writing a 32-bit word in pinned host
//   memory that the GPU polls (cuStreamWaitValue32).
// A released word is never taken back, and every ticket is released when
// its operation finishes, fails or is dropped, so a stream never waits on a
// failed operation: its error goes to the caller, as the operation's.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "services/cuda/driver_api.hpp"

namespace rdmx::coll {

struct StreamSlot;  // a word in a GPU's pinned page, see stream_order.cpp

class StreamTicket {
 public:
  StreamTicket() = default;
  ~StreamTicket() { release(); }
  StreamTicket(StreamTicket&& other) noexcept;
  StreamTicket& operator=(StreamTicket&& other) noexcept;
  StreamTicket(const StreamTicket&) = delete;
  StreamTicket& operator=(const StreamTicket&) = delete;

  bool active() const noexcept { return slot_ != nullptr; }
  // Waits, bounded by `deadline`, for the stream's work queued before the
  // call; throws Timeout (naming `op` and the GPU) when it does not finish.
  void wait_for_inputs(std::chrono::steady_clock::time_point deadline, const char* op);
  // Lets the stream's later work run. Idempotent.
  void release() noexcept;

 private:
  friend class StreamOrder;
  std::shared_ptr<StreamSlot> slot_;
  std::uint32_t value_ = 0;
  core::cuda::CUevent inputs_ = nullptr;
};

// One per communicator: its word, taken on first use.
class StreamOrder {
 public:
  // At the call, on the caller's thread: queues the event and the wait on
  // `stream` (a CUstream) of GPU `gpu`. Throws Error when the driver refuses.
  StreamTicket enter(void* stream, int gpu, const char* op);

 private:
  std::shared_ptr<StreamSlot> slot_;
  std::uint32_t next_ = 0;
};

}  // namespace rdmx::coll
