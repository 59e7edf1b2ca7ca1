// SPDX-License-Identifier: MIT
// How a communicator runs its operations: on the caller's thread when
// nothing is queued before them, otherwise through its Executor
// (executor.hpp); and what running one is: its sequence number and
// algorithm, its reduction, a copy of a send buffer that overlaps the
// receive buffer in a way no algorithm handles, the user buffers
// registered, and its schedule run on the Links.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "coll/combine.hpp"
#include "coll/executor.hpp"
#include "coll/flight_recorder.hpp"
#include "coll/host_layout.hpp"
#include "coll/links.hpp"
#include "coll/selection.hpp"
#include "services/cuda/memory.hpp"

namespace rdmx::coll {

class CommExecution {
 public:
  using Call = coll::Call;

  // `direct_min`: RDMX_COLL_DIRECT_MIN, as coll_settings() read it.
  // `recorder` learns of every collective as it enters and leaves it.
  CommExecution(Links& links, const AlgoSelector& selector, const HostLayout& layout, FlightRecorder& recorder,
                int rank, int size, std::chrono::milliseconds timeout, std::size_t direct_min);
  CommExecution(const CommExecution&) = delete;
  CommExecution& operator=(const CommExecution&) = delete;

  // The sequence number the next collective gets.
  std::uint64_t next_sequence() const noexcept { return seq_ + 1; }
  // True on the thread running an operation or task of this communicator.
  bool runs_here() const noexcept { return executor_->runs_here(); }

  // Runs `job` inline when it blocks and nothing is queued or running, or
  // when called by the job running on this thread (a task's own calls are
  // part of it); queues it otherwise. `what` names it in a Timeout (the
  // operation's name when null).
  Work run_or_post(Executor::Job job, std::uint64_t profile_id, bool async, const char* what = nullptr);
  // Fails every queued operation with `reason` (abort).
  void drop(const std::string& reason) { executor_->drop(reason); }
  // Lets the worker finish what is queued, then joins it.
  void stop() { executor_->stop(); }

 private:
  void execute(const Call& call, int gpu, StreamTicket& ticket);
  // The in-place forms the algorithms handle.
  bool supported_in_place(const Call& call, std::size_t e) const;
  // `call`, or `copy` of it reading a copy of its send buffer when the send
  // and receive buffers overlap otherwise than supported_in_place().
  const Call& guard_overlap(const Call& call, std::size_t e, std::size_t send_bytes, std::size_t recv_bytes,
                            const Combine& combine, Call& copy);
  void register_user_buffers(const Call& call, std::size_t send_bytes, std::size_t recv_bytes);

  Links& links_;
  FlightRecorder& recorder_;
  const AlgoSelector& selector_;
  const HostLayout& layout_;
  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  // RDMX_COLL_DIRECT_MIN: transfers from this size on are written into the
  // receiver's buffer directly (0, the default, turns it off). Every rank
  // must agree. Off by default: on shm a WRITE into another process's heap
  // is copied by that process (through its rings), which measured slower
  // than the buffers; over tcp it saves the receiver's copy (docs/COLLECTIVES.md).
  const std::size_t direct_min_;
  std::uint64_t seq_ = 0;
  Schedule schedule_;
  std::vector<char> send_copy_;                    // see guard_overlap()
  core::cuda::DeviceAllocation device_send_copy_;  // the same on a GPU
  std::shared_ptr<Executor> executor_;
};

}  // namespace rdmx::coll
