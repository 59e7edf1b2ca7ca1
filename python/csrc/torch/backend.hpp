// SPDX-License-Identifier: MIT
// ProcessGroupRdmx: the torch.distributed backend "rdmx", an
// rdmx::Communicator behind torch 2.x's c10d::Backend, for CPU tensors and,
// where torch has CUDA, CUDA tensors ordered on the current stream.
//
// A thin adapter: each call checks torch's arguments, describes itself as
// one coll::Call (or, for tagged messages, one task) and hands it
// to the Communicator, whose executor runs it. A blocking call (torch's
// async_op=False) runs on the caller's thread; an asynchronous one returns
// an RdmxWork over the Communicator's Work.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <tuple>
#include <utility>

#include "coll/communicator_internal.hpp"
#include "rdmx/comm.hpp"
#include "tensors.hpp"
#include "work.hpp"

namespace rdmx::torch_backend {

// A new process's place in a running job (join_group()), or an existing
// rank's grown communicator (ProcessGroupRdmx::grow()), kept until the
// process makes its next rdmx group: init_process_group then takes it
// instead of connecting anew. Returns (rank, size, tag).
std::tuple<int, int, std::string> join_group(const c10::intrusive_ptr<c10d::Store>& store, const std::string& tag,
                                             std::chrono::milliseconds timeout);
// The kept communicator when it is `rank` of `size`, else null.
std::unique_ptr<Communicator> take_pending_group(int rank, int size);

class ProcessGroupRdmx : public c10d::Backend {
 public:
  // Collective over the group: rendezvous through `store` (torch's, already
  // prefixed for this group) and connect every pair, bounded by `timeout`.
  ProcessGroupRdmx(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout);
  // A group over `comm` (a split); `store` is the group's, for monitoredBarrier.
  ProcessGroupRdmx(std::unique_ptr<Communicator> comm, const c10::intrusive_ptr<c10d::Store>& store,
                   std::chrono::milliseconds timeout);
  ~ProcessGroupRdmx() override;

  const std::string getBackendName() const override { return "rdmx"; }
  c10::intrusive_ptr<Options> getBackendOptions() override { return options_; }
  // How each peer is reached ("shm", "tcp", ...; empty for this rank).
  std::vector<std::string> peer_providers() const;
  std::chrono::milliseconds timeout() const { return timeout_; }
  Communicator& communicator() const;

  using Work = c10d::Work;
  c10::intrusive_ptr<Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                               const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<Work> allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                     const c10d::AllgatherOptions& opts) override;
  // The tensor collectives take the names torch has had since 2.0: later
  // releases forward their new names (all_gather_single, ...) to these.
  c10::intrusive_ptr<Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                               std::vector<at::Tensor>& inputs,
                                               const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                  const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                   const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                          std::vector<std::vector<at::Tensor>>& inputs,
                                          const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<Work> alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                                         std::vector<int64_t>& input_splits,
                                         const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                    const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<Work> barrier(const c10d::BarrierOptions& opts) override;
  // A barrier that names the ranks that did not arrive within opts.timeout
  // (every one of them when wait_all_ranks, else the first), as Gloo's.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  c10::intrusive_ptr<Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;

  // batch_isend_irecv (backend_p2p_batch.cpp): the sends and recvs between
  // the two calls run together; other calls run as usual.
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<Work> endCoalescing() override;

  // torch's split_group: every rank of this group calls it; those in
  // `ranks` form the new group (ranked by their place in `ranks`), the
  // others get null. The new group keeps this one's timeout.
  bool supportsSplitting() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
  // Going on after a rank dies (backend_recovery.cpp). torch's
  // shrink_group: the survivors' group; `ranks_to_exclude` must be what the
  // survivors agreed (agree_failures() gives it).
  bool supportsShrinking() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t>& ranks_to_exclude, int shrink_flags,
                                           const c10::intrusive_ptr<Options>& opts) override;
  std::vector<int> agree_failures();
  // Collective: makes room for `count` new processes (join_group()) in
  // `store`, and keeps the grown communicator for the next group this
  // process makes with its rank and size (take_pending_group()). Returns
  // (rank, size, tag) of it.
  std::tuple<int, int, std::string> grow(int count, const c10::intrusive_ptr<c10d::Store>& store);

  // Fails pending and later operations at once and tells the peers
  // (destroy_process_group after an error, torch's abort path).
  void abort() override;
  // Finishes what is queued, says goodbye to the peers, releases the
  // connections; later calls fail with a clear error.
  void shutdown() override;
  uint64_t getSequenceNumberForGroup() override;
  void setSequenceNumberForGroup() override {}

 private:
  // Runs `call` now (blocking) or hands it to the Communicator's executor;
  // the returned Work completes with `outputs` or the error.
  c10::intrusive_ptr<Work> issue(c10d::OpType type, std::vector<at::Tensor> outputs, coll::Call call, bool async,
                                 const at::Tensor& device_of);
  // Runs `fn` as a task on the Communicator's executor; `tensors` are those
  // it reads or writes (their CUDA streams are waited for at its start).
  c10::intrusive_ptr<Work> issue_task(c10d::OpType type, std::vector<at::Tensor> outputs, std::function<void()> fn,
                                      const char* what, bool async, const std::vector<at::Tensor>& tensors = {});
  // Point to point (backend_p2p.cpp): tagged messages over rdmx's ordered ones.
  void send_tagged(const at::Tensor& tensor, int dst, int tag);
  void recv_tagged(const at::Tensor& tensor, int src, int tag);
  // A recv satisfied by a message kept earlier; false when none is kept.
  bool take_early(const at::Tensor& tensor, int src, int tag);
  // A message's payload (`sent_bytes`, `sent_tag`) into `into` when the tag
  // is the recv's, else kept for the recv that names it (false); `receive`
  // moves the payload's bytes.
  bool accept(std::int64_t sent_tag, std::uint64_t sent_bytes, const Dense& into, int src, int tag,
              const std::function<void(void*, std::size_t)>& receive);
  Error wrong_size(int src, int tag, std::uint64_t sent, std::size_t want) const;

  struct Message {
    bool send;
    at::Tensor tensor;
    int peer;
    int tag;
    c10::intrusive_ptr<RdmxWork> work;
  };
  c10::intrusive_ptr<Work> batch_message(bool is_send, const at::Tensor& tensor, int peer, int tag);
  void exchange(const std::vector<Message>& batch);
  // Sends `s` and receives one message from r's peer, together; true when
  // it was r's (else it is kept for the recv that names its tag).
  bool exchange_pair(const Message& s, const Message& r);

  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<Options> options_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::unique_ptr<Communicator> comm_;
  std::uint64_t monitored_barriers_ = 0;
  bool coalescing_ = false;
  std::vector<Message> batch_;                           // the p2p calls since startCoalescing
  std::vector<c10::intrusive_ptr<RdmxWork>> coalesced_;  // every call's Work since startCoalescing
  // torch's splitGroup asks each device type's backend in turn; this one
  // serves "cpu" and "cuda" alike, so the second ask of one split (the same
  // store, the same ranks) gets the first one's answer, not a second
  // Communicator::split that the ranks outside the split would run alone.
  c10::intrusive_ptr<c10d::Store> last_split_store_;
  std::vector<int> last_split_ranks_;
  c10::intrusive_ptr<c10d::Backend> last_split_;
  // Messages that arrived before the recv with their tag was run, by (source, tag).
  std::map<std::pair<int, int>, std::deque<at::Tensor>> early_;
};

}  // namespace rdmx::torch_backend
