// SPDX-License-Identifier: MIT
// A communicator's operations on GPU buffers ordered on the caller's CUDA
// stream (Communicator::set_cuda_stream), through StreamOrder
// (coll/cuda/stream_order.hpp): the operation waits for the stream's work
// queued before its call, and the stream's later work waits for it.
#pragma once

#include "coll/cuda/stream_order.hpp"
#include "rdmx/comm.hpp"

namespace rdmx::coll {

class DeviceOrder {
 public:
  // A CUstream, or null: operations are then not ordered on any stream.
  void set_stream(void* stream) noexcept { stream_ = stream; }

  // At the call, on the caller's thread: the ticket that orders operation
  // `op`, whose buffers are on GPU `gpu` (-1: host memory), on the stream;
  // an inactive one when nothing is to be ordered. `in_task`: the call is
  // made by a task the communicator is running (coll::submit_task).
  StreamTicket enter(CollOp op, int gpu, bool in_task);

 private:
  void* stream_ = nullptr;
  StreamOrder order_;
};

}  // namespace rdmx::coll
