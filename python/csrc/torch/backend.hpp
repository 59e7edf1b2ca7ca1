// SPDX-License-Identifier: MIT
// ProcessGroupRdmx: the torch.distributed backend "rdmx", an
// rdmx::Communicator behind torch's ProcessGroup (1.13) or Backend (>= 2.0)
// interface, for CPU tensors. Operations run in call order on one executor
// thread per group; each is one or a few blocking rdmx calls there.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <utility>

#include "compat.hpp"
#include "rdmx/comm.hpp"
#include "work.hpp"

namespace rdmx::torch_backend {

class ProcessGroupRdmx : public BackendBase {
 public:
  // Collective over the group: rendezvous through `store` (torch's, already
  // prefixed for this group) and connect every pair, bounded by `timeout`.
  ProcessGroupRdmx(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout);
  ~ProcessGroupRdmx() override;

  const std::string getBackendName() const override { return "rdmx"; }
  // How each peer is reached ("shm", "tcp", ...; empty for this rank).
  std::vector<std::string> peer_providers() const { return comm_->peer_providers(); }
  std::chrono::milliseconds timeout() const { return timeout_; }

  using Work = c10d::Work;
  c10::intrusive_ptr<Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                               const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<Work> allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<Work> _allgather_base(at::Tensor& output, at::Tensor& input,
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
  c10::intrusive_ptr<Work> alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                                         std::vector<int64_t>& input_splits,
                                         const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                    const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<Work> barrier(const c10d::BarrierOptions& opts) override;
  c10::intrusive_ptr<Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;

 private:
  c10::intrusive_ptr<Work> enqueue(c10d::OpType type, const char* op, std::vector<at::Tensor> outputs,
                                   std::function<void()> body);
  std::uint64_t profile_issue(c10d::OpType type, const std::vector<at::Tensor>& outputs) const;
  // Point to point (backend_p2p.cpp): tagged messages over rdmx's ordered ones.
  void send_tagged(const at::Tensor& tensor, int dst, int tag);
  void recv_tagged(const at::Tensor& tensor, int src, int tag);

  std::chrono::milliseconds timeout_;
  std::unique_ptr<Communicator> comm_;
  // Messages that arrived before the recv with their tag was run, by (source, tag).
  std::map<std::pair<int, int>, std::deque<at::Tensor>> early_;
  Executor executor_;
};

}  // namespace rdmx::torch_backend
