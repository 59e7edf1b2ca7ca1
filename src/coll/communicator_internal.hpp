// SPDX-License-Identifier: MIT
// What lies under the public Communicator (include/rdmx/comm.hpp) and is not
// for users: one Call describing any operation, and the submission of calls
// and tasks to a communicator's executor. The public operations
// (communicator_calls.cpp) and the torch backend (python/csrc/torch), which
// builds compound operations and stages buffers, submit through these.
// Header-only, so the backend needs no symbol of the library's beyond the
// public API.
#pragma once

#include <cstddef>
#include <exception>
#include <functional>
#include <vector>

#include "rdmx/comm.hpp"

namespace rdmx::coll {

// One description of any operation of the Communicator; its methods build it.
struct Call {
  // The common form: an operation, its buffers, count, type, reduction and root.
  static Call of(CollOp op, const void* send, void* recv, std::size_t count, DataType type,
                 ReduceOp redop = ReduceOp::Sum, int root = -1) {
    Call c;
    c.op = op;
    c.send = send;
    c.recv = recv;
    c.count = count;
    c.type = type;
    c.redop = redop;
    c.root = root;
    return c;
  }

  CollOp op = CollOp::Barrier;
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;       // elements (send count for Send/SendRecv)
  std::size_t recv_count = 0;  // SendRecv only
  DataType type = DataType::Uint8;
  ReduceOp redop = ReduceOp::Sum;
  int root = -1;    // root, or the peer for Send/Recv, the destination for SendRecv
  int source = -1;  // SendRecv only
  std::vector<std::size_t> send_counts, send_displs, recv_counts, recv_displs;  // AllToAllv
  // Optional hooks for adapters that stage buffers (the torch backend),
  // run on the thread that runs the operation. `then` runs once it has
  // succeeded, before anyone learns so (copy results out of a staging
  // buffer); what it throws fails the operation. `done` runs last, with
  // the operation's error or null, before its Work completes, and must not
  // throw. Both are released before the Work completes.
  std::function<void()> then;
  std::function<void(std::exception_ptr)> done;
};

// What every Communicator is (Communicator's constructor is private to it).
class CommunicatorCore : public Communicator {
 public:
  using Call = coll::Call;
  virtual Work submit(Call call, bool async) = 0;
  // Runs `fn` on this communicator's executor, in call order with its
  // operations (as a host function on a CUDA stream): an adapter builds a
  // compound operation, such as a tagged message, from blocking calls,
  // which run inline within it. The Work fails with what `fn` throws;
  // `what` names it in errors. `fn` must not wait for asynchronous calls it
  // makes (they run after it).
  virtual Work submit_task(std::function<void()> fn, const char* what, bool async) = 0;

 protected:
  CommunicatorCore() = default;
};

// Runs `call` on `comm`, blocking (async false) or not.
inline Work submit(Communicator& comm, Call call, bool async) {
  return static_cast<CommunicatorCore&>(comm).submit(std::move(call), async);
}
// CommunicatorCore::submit_task on `comm`.
inline Work submit_task(Communicator& comm, std::function<void()> fn, const char* what, bool async) {
  return static_cast<CommunicatorCore&>(comm).submit_task(std::move(fn), what, async);
}

}  // namespace rdmx::coll
