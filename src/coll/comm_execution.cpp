// SPDX-License-Identifier: MIT
#include "coll/comm_execution.hpp"

#include "coll/algorithms.hpp"
#include "coll/comm_validation.hpp"
#include "coll/cuda/device_ops.hpp"
#include "coll/reduce.hpp"
#include "rdmx/profile.hpp"
#include "services/log.hpp"

namespace rdmx::coll {

CommExecution::CommExecution(Links& links, const AlgoSelector& selector, const HostLayout& layout,
                             FlightRecorder& recorder, int rank, int size, std::chrono::milliseconds timeout,
                             std::size_t direct_min)
    : links_(links),
      recorder_(recorder),
      selector_(selector),
      layout_(layout),
      rank_(rank),
      size_(size),
      timeout_(timeout),
      direct_min_(direct_min),
      executor_(
          std::make_shared<Executor>(rank_, [this](Executor::Job& job) { execute(job.call, job.gpu, job.ticket); })) {}

Work CommExecution::run_or_post(Executor::Job job, std::uint64_t profile_id, bool async, const char* what) {
  // No lock and no Work state inline: the caller only waits.
  if (!async && (executor_->idle() || executor_->runs_here())) {
    profile::waited(profile_id);
    executor_->complete(job);
    profile::completed(profile_id);
    return Work();
  }
  job.state = std::make_shared<Work::State>();
  job.state->profile_id = profile_id;
  job.state->timeout = timeout_;
  job.state->what = std::string(what != nullptr ? what : to_string(job.call.op)) + " on rank " + std::to_string(rank_);
  Work work(job.state);
  executor_->post(std::move(job), executor_);
  if (!async) work.wait(std::chrono::milliseconds(-1));
  return work;
}

void CommExecution::execute(const Call& call, int gpu, StreamTicket& ticket) {
  const Links::Driving driving(links_);
  if (links_.aborted()) throw links_.aborted_error(to_string(call.op));
  OpDesc desc;
  desc.op = call.op;
  desc.type = call.type;
  desc.redop = call.redop;
  desc.count = call.count;
  desc.root = call.root;
  if (call.op == CollOp::AllToAllv || call.op == CollOp::Barrier) desc.count = 0;
  if (!desc.p2p()) {
    desc.seq = ++seq_;
    desc.algo = selector_.choose(call.op, reported_bytes(call, size_), size_);
  } else {
    desc.algo = Algo::Direct;
  }
  if (size_ == 1 && !desc.p2p()) desc.algo = Algo::Local;
  if (core::log_enabled(core::LogLevel::Trace)) {
    RDMX_TRACE("%s: %s", describe(desc).c_str(),
               selector_.explain(call.op, reported_bytes(call, size_), size_).c_str());
  }
  const std::size_t e = size_of(call.type);
  Combine combine;
  combine.elem = e;
  combine.type = call.type;
  combine.op = call.redop == ReduceOp::Avg ? ReduceOp::Sum : call.redop;
  combine.host_reduce = reduce_function(call.type, combine.op);
  combine.avg_divisor = call.redop == ReduceOp::Avg ? size_ : 0;
  if (gpu >= 0) combine.device = &links_.device_ops(gpu);
  Call copy;
  const auto [send_bytes, recv_bytes] = call_extents(call, rank_, size_, e);
  const Call& run_call = guard_overlap(call, e, send_bytes, recv_bytes, combine, copy);
  ticket.wait_for_inputs(core::deadline_after(timeout_), to_string(call.op));
  register_user_buffers(run_call, send_bytes, recv_bytes);
  schedule_.clear();
  OpContext ctx{links_, run_call, desc, schedule_, combine, timeout_, rank_, size_, e, direct_min_, &layout_};
  // The flight recorder keeps collectives only.
  const bool recorded = !desc.p2p();
  if (recorded) recorder_.entered(desc, profile::counted_bytes(call.op, call.count, call.type, size_));
  try {
    links_.enter(desc);
    run_algorithm(ctx);
    links_.leave(desc);
  } catch (...) {
    if (recorded) recorder_.left(desc.seq, false);
    throw;
  }
  if (recorded) recorder_.left(desc.seq, true);
}

// Any other overlap of the send and receive buffers (MPI_IN_PLACE's
// reduce_scatter into the first block, partly overlapping buffers) runs
// from a copy of the send buffer.
bool CommExecution::supported_in_place(const Call& call, std::size_t e) const {
  const auto* s = static_cast<const char*>(call.send);
  const auto* r = static_cast<const char*>(call.recv);
  const std::size_t mine = static_cast<std::size_t>(rank_) * call.count * e;
  switch (call.op) {
    case CollOp::AllReduce:
    case CollOp::Reduce:
    case CollOp::Broadcast:
    case CollOp::AllToAll: return s == r;
    case CollOp::AllGather:
    case CollOp::Gather: return s == r + mine;
    case CollOp::ReduceScatter: return s + mine == r;
    case CollOp::Scatter: return r == s + mine;
    default: return false;
  }
}

const CommExecution::Call& CommExecution::guard_overlap(const Call& call, std::size_t e, std::size_t send_bytes,
                                                        std::size_t recv_bytes, const Combine& combine, Call& copy) {
  const auto s = reinterpret_cast<std::uintptr_t>(call.send), r = reinterpret_cast<std::uintptr_t>(call.recv);
  const bool overlap = send_bytes != 0 && recv_bytes != 0 && s < r + recv_bytes && r < s + send_bytes;
  if (!overlap || supported_in_place(call, e)) return call;
  copy = call;
  if (combine.device != nullptr) {
    const int gpu = combine.device->device();
    if (device_send_copy_.device() != gpu || device_send_copy_.size() < send_bytes) {
      device_send_copy_ = core::cuda::DeviceAllocation();
      device_send_copy_ = core::cuda::DeviceAllocation(send_bytes, gpu, "copy of an overlapping send buffer");
    }
    combine.copy(device_send_copy_.get(), call.send, send_bytes);
    copy.send = device_send_copy_.get();
    return copy;
  }
  send_copy_.assign(static_cast<const char*>(call.send), static_cast<const char*>(call.send) + send_bytes);
  copy.send = send_copy_.data();
  return copy;
}

// Registers whole user buffers once, so that in-place WRITEs of any part of
// them find a covering registration.
void CommExecution::register_user_buffers(const Call& call, std::size_t send_bytes, std::size_t recv_bytes) {
  const std::size_t limit = links_.stage_limit();
  if (call.send != nullptr && send_bytes > limit) links_.lkey_for(call.send, send_bytes);
  if (call.recv != nullptr && recv_bytes > limit && call.op != CollOp::Recv) links_.lkey_for(call.recv, recv_bytes);
}

}  // namespace rdmx::coll
