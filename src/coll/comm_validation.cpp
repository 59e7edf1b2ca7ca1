// SPDX-License-Identifier: MIT
#include "coll/comm_validation.hpp"

#include <algorithm>

#include "coll/cuda/kernels.hpp"
#include "services/cuda/driver.hpp"
#include "services/cuda/pointer.hpp"

namespace rdmx::coll {

void CallValidator::bad(const Call& call, const std::string& message, const std::string& hint) const {
  throw Error(ErrorCode::InvalidArgument, std::string(to_string(call.op)) + ": " + message,
              {.op = to_string(call.op), .rank = rank_, .hint = hint});
}

int CallValidator::validate(const Call& call, const Device& device) const {
  if (static_cast<int>(call.type) >= kDataTypeCount) bad(call, "unknown data type");
  if (static_cast<int>(call.redop) >= kReduceOpCount) {
    bad(call, "unknown reduction operation");
  }
  const bool reduces = call.op == CollOp::AllReduce || call.op == CollOp::ReduceScatter || call.op == CollOp::Reduce;
  if (reduces && call.redop == ReduceOp::Avg && !is_floating(call.type)) {
    bad(call, std::string("avg is defined for floating types only, not ") + to_string(call.type),
        "use sum and divide, or a floating type");
  }
  const bool rooted = call.op == CollOp::Broadcast || call.op == CollOp::Reduce || call.op == CollOp::Gather ||
                      call.op == CollOp::Scatter;
  if (rooted && (call.root < 0 || call.root >= size_)) {
    bad(call, "root " + std::to_string(call.root) + " is not a rank of this communicator (size " +
                  std::to_string(size_) + ")");
  }
  auto check_peer = [&](int peer, const char* what) {
    if (peer < 0 || peer >= size_ || peer == rank_) {
      bad(call, std::string(what) + " " + std::to_string(peer) + " is not another rank of this communicator (rank " +
                    std::to_string(rank_) + " of " + std::to_string(size_) + ")");
    }
  };
  if (call.op == CollOp::Send || call.op == CollOp::Recv) check_peer(call.root, "peer");
  if (call.op == CollOp::SendRecv) {
    check_peer(call.root, "destination");
    check_peer(call.source, "source");
  }
  const std::size_t e = size_of(call.type);
  const std::size_t limit = (std::size_t{1} << 47) / e / static_cast<std::size_t>(size_);
  if (call.count > limit || call.recv_count > limit) {
    bad(call, "count " + std::to_string(std::max(call.count, call.recv_count)) + " is too large");
  }
  auto need = [&](const void* p, std::size_t elems, const char* which) {
    if (p == nullptr && elems != 0)
      bad(call, std::string(which) + " buffer is null with count " + std::to_string(elems));
  };
  const std::size_t n = static_cast<std::size_t>(size_);
  switch (call.op) {
    case CollOp::AllReduce:
    case CollOp::Reduce:
      need(call.send, call.count, "send");
      if (call.op == CollOp::AllReduce || call.root == rank_) need(call.recv, call.count, "receive");
      break;
    case CollOp::AllGather:
      need(call.send, call.count, "send");
      need(call.recv, call.count * n, "receive");
      break;
    case CollOp::ReduceScatter:
    case CollOp::AllToAll:
      need(call.send, call.count * n, "send");
      need(call.recv, call.count, "receive");
      break;
    case CollOp::Broadcast: need(call.recv, call.count, "broadcast"); break;
    case CollOp::Gather:
      need(call.send, call.count, "send");
      if (call.root == rank_) need(call.recv, call.count * n, "receive");
      break;
    case CollOp::Scatter:
      if (call.root == rank_) need(call.send, call.count * n, "send");
      need(call.recv, call.count, "receive");
      break;
    case CollOp::AllToAllv: {
      if (call.send_counts.size() != n || call.send_displs.size() != n || call.recv_counts.size() != n ||
          call.recv_displs.size() != n) {
        bad(call, "counts and displacements need " + std::to_string(n) + " entries each (got " +
                      std::to_string(call.send_counts.size()) + ", " + std::to_string(call.send_displs.size()) + ", " +
                      std::to_string(call.recv_counts.size()) + ", " + std::to_string(call.recv_displs.size()) + ")");
      }
      for (std::size_t j = 0; j < n; ++j) {
        if (call.send_counts[j] > limit || call.recv_counts[j] > limit || call.send_displs[j] > limit * n ||
            call.recv_displs[j] > limit * n) {
          bad(call, "count or displacement of rank " + std::to_string(j) + " is too large");
        }
        need(call.send, call.send_counts[j], "send");
        need(call.recv, call.recv_counts[j], "receive");
      }
      const auto r = static_cast<std::size_t>(rank_);
      if (call.send_counts[r] != call.recv_counts[r]) {
        bad(call,
            "this rank sends itself " + std::to_string(call.send_counts[r]) + " elements but expects " +
                std::to_string(call.recv_counts[r]),
            "send_counts[rank] must equal recv_counts[rank]");
      }
      break;
    }
    case CollOp::Send: need(call.send, call.count, "send"); break;
    case CollOp::Recv: need(call.recv, call.count, "receive"); break;
    case CollOp::SendRecv:
      need(call.send, call.count, "send");
      need(call.recv, call.recv_count, "receive");
      break;
    case CollOp::Barrier: break;
  }
  const auto [send_bytes, recv_bytes] = call_extents(call, rank_, size_, e);
  return operation_gpu(call, send_bytes, recv_bytes, device);
}

int CallValidator::operation_gpu(const Call& call, std::size_t send_bytes, std::size_t recv_bytes,
                                 const Device& device) const {
  if (core::cuda::driver_if_loaded() == nullptr) return -1;  // no device memory without a driver
  const char* op = to_string(call.op);
  auto place = [](const core::cuda::PointerInfo& info) {
    return info.type == MemoryType::Host ? std::string("host memory") : "GPU " + std::to_string(info.device);
  };
  core::cuda::PointerInfo send, recv;
  const bool has_send = call.send != nullptr && send_bytes != 0, has_recv = call.recv != nullptr && recv_bytes != 0;
  if (has_send) send = core::cuda::classify(call.send, send_bytes, op);
  if (has_recv) recv = core::cuda::classify(call.recv, recv_bytes, op);
  if (has_send && has_recv && (send.type != recv.type || send.device != recv.device)) {
    bad(call, "the send buffer is in " + place(send) + " and the receive buffer in " + place(recv),
        "one operation's buffers must all be host memory or all on one GPU");
  }
  const core::cuda::PointerInfo& where = has_send ? send : recv;
  if (where.type == MemoryType::Host) return -1;
  const CudaMemorySupport support = device.caps().cuda_memory;
  if (support == CudaMemorySupport::None) {
    throw Error(ErrorCode::NotSupported,
                std::string(op) + ": its buffers are device memory on GPU " + std::to_string(where.device) +
                    ", which the " + device.name() + " provider does not serve (cuda_memory: none)",
                {.op = op, .rank = rank_, .hint = "use RDMX_PROVIDER=shm or tcp, or host buffers"});
  }
  const bool reduces = call.op == CollOp::AllReduce || call.op == CollOp::ReduceScatter || call.op == CollOp::Reduce;
  if (reduces && !cuda_kernels_built()) {
    throw Error(ErrorCode::NotSupported,
                std::string(op) + ": device buffers are reduced on the GPU, and " + cuda_kernels_note(),
                {.op = op, .rank = rank_, .hint = "rebuild rdmx where nvcc is installed, or use host buffers"});
  }
  return where.device;
}

std::size_t reported_bytes(const coll::Call& call, int size) {
  const std::size_t e = size_of(call.type), n = static_cast<std::size_t>(size);
  switch (call.op) {
    case CollOp::AllGather:
    case CollOp::ReduceScatter:
    case CollOp::AllToAll:
    case CollOp::Gather:
    case CollOp::Scatter: return call.count * e * n;
    default: return call.count * e;
  }
}

std::pair<std::size_t, std::size_t> call_extents(const coll::Call& call, int rank, int size, std::size_t e) {
  const std::size_t n = static_cast<std::size_t>(size);
  const bool root = call.root == rank;
  switch (call.op) {
    case CollOp::AllReduce:
    case CollOp::Broadcast: return {call.count * e, call.count * e};
    case CollOp::Reduce: return {call.count * e, root ? call.count * e : 0};
    case CollOp::AllGather: return {call.count * e, call.count * e * n};
    case CollOp::Gather: return {call.count * e, root ? call.count * e * n : 0};
    case CollOp::ReduceScatter:
    case CollOp::AllToAll: return {call.count * e * n, call.count * e};
    case CollOp::Scatter: return {root ? call.count * e * n : 0, call.count * e};
    case CollOp::AllToAllv: {
      std::size_t send_extent = 0, recv_extent = 0;
      for (std::size_t j = 0; j < n; ++j) {
        send_extent = std::max(send_extent, (call.send_displs[j] + call.send_counts[j]) * e);
        recv_extent = std::max(recv_extent, (call.recv_displs[j] + call.recv_counts[j]) * e);
      }
      return {send_extent, recv_extent};
    }
    case CollOp::Send: return {call.count * e, 0};
    case CollOp::Recv: return {0, call.count * e};
    case CollOp::SendRecv: return {call.count * e, call.recv_count * e};
    case CollOp::Barrier: return {0, 0};
  }
  return {0, 0};
}

}  // namespace rdmx::coll
