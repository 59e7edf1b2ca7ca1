// SPDX-License-Identifier: MIT
// send and recv with tags. rdmx matches point-to-point messages in order per
// pair and has no tags, so each message is a small header (tag, bytes)
// followed by the payload, sent or received by one task on the
// Communicator's executor (in call order with the collectives). A recv that
// meets a message with another tag keeps it for the recv that names that
// tag, so tags match as in Gloo whatever the order of the recvs, at the
// cost of one copy for the out-of-order message only.
#include <cstdint>
#include <cstring>

#include "backend.hpp"
#include "cuda_side.hpp"
#include "p2p_message.hpp"
#include "tensors.hpp"

namespace rdmx::torch_backend {
namespace {

void check_peer(int peer, int rank, int size, const char* op) {
  if (peer < 0 || peer >= size || peer == rank) {
    throw Error(ErrorCode::InvalidArgument,
                std::string(op) + ": peer " + std::to_string(peer) + " is not another rank of this group (rank " +
                    std::to_string(rank) + " of " + std::to_string(size) + ")",
                {.op = op, .rank = rank});
  }
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  const char* op = "send";
  check_single(tensors, op);
  check_peer(dst, getRank(), getSize(), op);
  at::Tensor t = tensors[0];
  if (coalescing_) return batch_message(true, t, dst, tag);
  // torch gives send no async_op: a wait that follows runs it on its thread.
  return issue_task(c10d::OpType::SEND, {t}, [this, t, dst, tag] { send_tagged(t, dst, tag); }, op, true, {t});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  const char* op = "recv";
  check_single(tensors, op);
  check_peer(src, getRank(), getSize(), op);
  at::Tensor t = tensors[0];
  if (coalescing_) return batch_message(false, t, src, tag);
  return issue_task(c10d::OpType::RECV, {t}, [this, t, src, tag] { recv_tagged(t, src, tag); }, op, true, {t});
}

void ProcessGroupRdmx::send_tagged(const at::Tensor& tensor, int dst, int tag) {
  Dense d = dense_input(tensor);
  settle(d.buf);  // a dense copy is read by the sends below
  Header header{tag, byte_size(d.buf)};
  Communicator& comm = communicator();
  comm.send(&header, sizeof header, DataType::Uint8, dst);
  if (header.bytes != 0) comm.send(d.data(), header.bytes, DataType::Uint8, dst);
}

bool ProcessGroupRdmx::take_early(const at::Tensor& tensor, int src, int tag) {
  auto early = early_.find({src, tag});
  if (early == early_.end() || early->second.empty()) return false;
  at::Tensor kept = std::move(early->second.front());
  early->second.pop_front();
  if (early->second.empty()) early_.erase(early);
  Dense d = dense_output(tensor);
  const std::size_t want = byte_size(d.buf);
  if (static_cast<std::size_t>(kept.numel()) != want) {
    throw wrong_size(src, tag, static_cast<std::uint64_t>(kept.numel()), want);
  }
  if (d.buf.is_cuda()) {
    d.buf.reshape({-1}).view(at::kByte).copy_(kept);
  } else {
    std::memcpy(d.data(), kept.data_ptr(), want);
  }
  d.finish();
  settle(d.buf);  // landed before the recv completes
  return true;
}

Error ProcessGroupRdmx::wrong_size(int src, int tag, std::uint64_t sent, std::size_t want) const {
  return Error(
      ErrorCode::InvalidArgument,
      "recv: rank " + std::to_string(src) + " sent " + std::to_string(sent) + " bytes with tag " + std::to_string(tag) +
          "; this recv's tensor holds " + std::to_string(want),
      {.op = "recv", .rank = getRank(), .peer_rank = src, .hint = "send and recv tensors of the same size and dtype"});
}

bool ProcessGroupRdmx::accept(std::int64_t sent_tag, std::uint64_t sent_bytes, const Dense& into, int src, int tag,
                              const std::function<void(void*, std::size_t)>& receive) {
  if (sent_tag != tag) {
    at::Tensor kept = at::empty({static_cast<std::int64_t>(sent_bytes)}, at::kByte);
    if (sent_bytes != 0) receive(kept.data_ptr(), sent_bytes);
    early_[{src, static_cast<int>(sent_tag)}].push_back(std::move(kept));
    return false;
  }
  const std::size_t want = byte_size(into.buf);
  if (sent_bytes != want) {
    at::Tensor drained = at::empty({static_cast<std::int64_t>(sent_bytes)}, at::kByte);
    if (sent_bytes != 0) receive(drained.data_ptr(), sent_bytes);
    throw wrong_size(src, tag, sent_bytes, want);
  }
  if (want != 0) receive(into.data(), want);
  into.finish();
  settle(into.buf);
  return true;
}

void ProcessGroupRdmx::recv_tagged(const at::Tensor& tensor, int src, int tag) {
  if (take_early(tensor, src, tag)) return;
  Communicator& comm = communicator();
  Dense d = dense_output(tensor);
  auto receive = [&](void* buf, std::size_t bytes) { comm.recv(buf, bytes, DataType::Uint8, src); };
  for (;;) {
    Header header;
    comm.recv(&header, sizeof header, DataType::Uint8, src);
    if (accept(header.tag, header.bytes, d, src, tag, receive)) return;
  }
}

}  // namespace rdmx::torch_backend
