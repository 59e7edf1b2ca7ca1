// SPDX-License-Identifier: MIT
// The group's life (creation, executor, destruction) and its collectives.
#include "backend.hpp"

#include <Python.h>

#include "rdmx/profile.hpp"
#include "store_adapter.hpp"
#include "tensors.hpp"

namespace rdmx::torch_backend {
namespace {

std::unique_ptr<Communicator> connect(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                      std::chrono::milliseconds timeout) {
  CommOptions options;
  options.timeout = timeout;
  options.tag = "rdmx";
  // The group records its own calls (enqueue): when the caller issued and
  // waited, not when its thread ran them.
  options.profile = false;
  return Communicator::create(std::make_shared<TorchStore>(store), rank, size, options);
}

// The operation as rdmx/profile.hpp records it.
CollOp coll_op_of(c10d::OpType type) {
  switch (type) {
    case c10d::OpType::BROADCAST: return CollOp::Broadcast;
    case c10d::OpType::REDUCE: return CollOp::Reduce;
    case c10d::OpType::ALLGATHER:
    case c10d::OpType::_ALLGATHER_BASE: return CollOp::AllGather;
    case c10d::OpType::GATHER: return CollOp::Gather;
    case c10d::OpType::SCATTER: return CollOp::Scatter;
    case c10d::OpType::REDUCE_SCATTER:
    case c10d::OpType::_REDUCE_SCATTER_BASE: return CollOp::ReduceScatter;
    case c10d::OpType::ALLTOALL_BASE: return CollOp::AllToAll;
    case c10d::OpType::BARRIER: return CollOp::Barrier;
    case c10d::OpType::SEND: return CollOp::Send;
    case c10d::OpType::RECV: return CollOp::Recv;
    default: return CollOp::AllReduce;
  }
}

}  // namespace

// Bytes as nccl-tests counts them: the outputs, and reduce_scatter's input
// (the group's size times its output).
std::uint64_t ProcessGroupRdmx::profile_issue(c10d::OpType type, const std::vector<at::Tensor>& outputs) const {
  std::size_t bytes = 0;
  for (const auto& t : outputs) bytes += t.numel() * t.element_size();
  const CollOp op = coll_op_of(type);
  if (op == CollOp::ReduceScatter) bytes *= static_cast<std::size_t>(getSize());
  DataType dtype = DataType::Uint8;
  if (!outputs.empty()) {
    try {
      dtype = data_type_of(outputs[0].scalar_type(), "profile");
    } catch (const Error&) {
      // A type rdmx does not reduce; the call itself reports it.
    }
  }
  return profile::issued(getRank(), getSize(), op, bytes, dtype);
}

ProcessGroupRdmx::ProcessGroupRdmx(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                   std::chrono::milliseconds timeout)
    : BackendBase(rank, size), timeout_(timeout), comm_(connect(store, rank, size, timeout)), executor_(rank) {}

ProcessGroupRdmx::~ProcessGroupRdmx() {
  // Queued tasks finish (each bounded by the timeout) before the
  // communicator goes. Their futures' callbacks may be Python code, which
  // needs the interpreter lock the destroying thread may hold.
  if (Py_IsInitialized() && PyGILState_Check()) {
    Py_BEGIN_ALLOW_THREADS executor_.stop();
    Py_END_ALLOW_THREADS
  } else {
    executor_.stop();
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::enqueue(c10d::OpType type, const char* op,
                                                         std::vector<at::Tensor> outputs, std::function<void()> body) {
  const std::uint64_t profile_id = profile::enabled() ? profile_issue(type, outputs) : 0;
  auto work = c10::make_intrusive<RdmxWork>(getRank(), type, std::string(op) + " on rank " + std::to_string(getRank()),
                                            std::move(outputs), profile_id);
  executor_.post(work, std::move(body));
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  const char* op = "broadcast";
  check_single(tensors, op);
  check_root(static_cast<int>(opts.rootRank), getSize(), op);
  at::Tensor t = tensors[0];
  const DataType type = data_type_of(t.scalar_type(), op);
  const int root = static_cast<int>(opts.rootRank);
  return enqueue(c10d::OpType::BROADCAST, op, {t}, [this, t, type, root] {
    Dense d = dense_inout(t);
    comm_->broadcast(d.data(), d.count(), type, root);
    d.finish();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  const char* op = "all_reduce";
  check_single(tensors, op);
  at::Tensor t = tensors[0];
  const DataType type = data_type_of(t.scalar_type(), op);
  const ReduceOp redop = reduce_op_of(opts.reduceOp, t.scalar_type(), op);
  return enqueue(c10d::OpType::ALLREDUCE, op, {t}, [this, t, type, redop] {
    Dense d = dense_inout(t);
    comm_->all_reduce(d.data(), d.data(), d.count(), type, redop);
    d.finish();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                     const c10d::AllreduceCoalescedOptions& opts) {
  const char* op = "all_reduce_coalesced";
  if (tensors.empty()) bad_argument(op, "got no tensors");
  for (const auto& t : tensors) {
    check_tensor(t, op);
    check_same_dtype(t, tensors[0], op, "the tensors'");
  }
  const DataType type = data_type_of(tensors[0].scalar_type(), op);
  const ReduceOp redop = reduce_op_of(opts.reduceOp, tensors[0].scalar_type(), op);
  return enqueue(c10d::OpType::ALLREDUCE_COALESCED, op, tensors, [this, tensors, type, redop] {
    at::Tensor flat = flatten(tensors);
    comm_->all_reduce(flat.data_ptr(), flat.data_ptr(), static_cast<std::size_t>(flat.numel()), type, redop);
    unflatten(flat, tensors);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::reduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::ReduceOptions& opts) {
  const char* op = "reduce";
  check_single(tensors, op);
  check_root(static_cast<int>(opts.rootRank), getSize(), op);
  at::Tensor t = tensors[0];
  const DataType type = data_type_of(t.scalar_type(), op);
  const ReduceOp redop = reduce_op_of(opts.reduceOp, t.scalar_type(), op);
  const int root = static_cast<int>(opts.rootRank);
  return enqueue(c10d::OpType::REDUCE, op, {t}, [this, t, type, redop, root] {
    Dense d = dense_inout(t);
    comm_->reduce(d.data(), d.data(), d.count(), type, redop, root);
    if (root == getRank()) d.finish();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllgatherOptions&) {
  const char* op = "all_gather";
  check_single(inputs, op);
  if (outputs.size() != 1) bad_argument(op, "takes one output list, got " + std::to_string(outputs.size()));
  at::Tensor in = inputs[0];
  check_list(outputs[0], in, static_cast<std::size_t>(getSize()), op, "the output list");
  const DataType type = data_type_of(in.scalar_type(), op);
  std::vector<at::Tensor> outs = outputs[0];
  return enqueue(c10d::OpType::ALLGATHER, op, outs, [this, in, outs, type] {
    Dense d = dense_input(in);
    at::Tensor flat = at::empty({static_cast<std::int64_t>(d.count()) * getSize()}, d.buf.options());
    comm_->all_gather(d.data(), flat.data_ptr(), d.count(), type);
    unflatten(flat, outs);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                 const c10d::AllgatherOptions&) {
  const char* op = "all_gather_into_tensor";
  check_tensor(input, op);
  check_tensor(output, op);
  check_same_dtype(input, output, op, "input and output");
  if (output.numel() != input.numel() * getSize()) {
    bad_argument(op, "the output has " + std::to_string(output.numel()) + " elements; expected " +
                         std::to_string(input.numel() * getSize()) + " (the input's " + std::to_string(input.numel()) +
                         " times the group size " + std::to_string(getSize()) + ")");
  }
  const DataType type = data_type_of(input.scalar_type(), op);
  at::Tensor in = input, out = output;
  return enqueue(c10d::OpType::_ALLGATHER_BASE, op, {out}, [this, in, out, type] {
    Dense din = dense_input(in);
    Dense dout = dense_output(out);
    comm_->all_gather(din.data(), dout.data(), din.count(), type);
    dout.finish();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::GatherOptions& opts) {
  const char* op = "gather";
  check_single(inputs, op);
  const int root = static_cast<int>(opts.rootRank);
  check_root(root, getSize(), op);
  at::Tensor in = inputs[0];
  std::vector<at::Tensor> outs = root_list(outputs, in, root, getRank(), getSize(), op, "the gather list");
  const DataType type = data_type_of(in.scalar_type(), op);
  return enqueue(c10d::OpType::GATHER, op, outs, [this, in, outs, type, root] {
    Dense d = dense_input(in);
    at::Tensor flat;
    if (root == getRank()) flat = at::empty({static_cast<std::int64_t>(d.count()) * getSize()}, d.buf.options());
    comm_->gather(d.data(), flat.defined() ? flat.data_ptr() : nullptr, d.count(), type, root);
    if (flat.defined()) unflatten(flat, outs);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::scatter(std::vector<at::Tensor>& outputs,
                                                         std::vector<std::vector<at::Tensor>>& inputs,
                                                         const c10d::ScatterOptions& opts) {
  const char* op = "scatter";
  check_single(outputs, op);
  const int root = static_cast<int>(opts.rootRank);
  check_root(root, getSize(), op);
  at::Tensor out = outputs[0];
  std::vector<at::Tensor> ins = root_list(inputs, out, root, getRank(), getSize(), op, "the scatter list");
  const DataType type = data_type_of(out.scalar_type(), op);
  return enqueue(c10d::OpType::SCATTER, op, {out}, [this, ins, out, type, root] {
    Dense d = dense_output(out);
    at::Tensor flat;
    if (!ins.empty()) flat = flatten(ins);
    comm_->scatter(flat.defined() ? flat.data_ptr() : nullptr, d.data(), d.count(), type, root);
    d.finish();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                                const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter";
  check_single(outputs, op);
  if (inputs.size() != 1) bad_argument(op, "takes one input list, got " + std::to_string(inputs.size()));
  at::Tensor out = outputs[0];
  check_list(inputs[0], out, static_cast<std::size_t>(getSize()), op, "the input list");
  const DataType type = data_type_of(out.scalar_type(), op);
  const ReduceOp redop = reduce_op_of(opts.reduceOp, out.scalar_type(), op);
  std::vector<at::Tensor> ins = inputs[0];
  return enqueue(c10d::OpType::REDUCE_SCATTER, op, {out}, [this, ins, out, type, redop] {
    at::Tensor flat = flatten(ins);
    Dense d = dense_output(out);
    comm_->reduce_scatter(flat.data_ptr(), d.data(), d.count(), type, redop);
    d.finish();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                      const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter_tensor";
  check_tensor(input, op);
  check_tensor(output, op);
  check_same_dtype(input, output, op, "input and output");
  if (input.numel() != output.numel() * getSize()) {
    bad_argument(op, "the input has " + std::to_string(input.numel()) + " elements; expected " +
                         std::to_string(output.numel() * getSize()) + " (the output's " +
                         std::to_string(output.numel()) + " times the group size " + std::to_string(getSize()) + ")");
  }
  const DataType type = data_type_of(output.scalar_type(), op);
  const ReduceOp redop = reduce_op_of(opts.reduceOp, output.scalar_type(), op);
  at::Tensor in = input, out = output;
  return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, op, {out}, [this, in, out, type, redop] {
    Dense din = dense_input(in);
    Dense dout = dense_output(out);
    comm_->reduce_scatter(din.data(), dout.data(), dout.count(), type, redop);
    dout.finish();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                               std::vector<int64_t>& output_splits,
                                                               std::vector<int64_t>& input_splits,
                                                               const c10d::AllToAllOptions&) {
  const char* op = "all_to_all_single";
  check_tensor(input, op);
  check_tensor(output, op);
  check_same_dtype(input, output, op, "input and output");
  const DataType type = data_type_of(input.scalar_type(), op);
  const auto n = static_cast<std::size_t>(getSize());
  at::Tensor in = input, out = output;
  if (output_splits.empty() && input_splits.empty()) {
    if (input.numel() != output.numel() || input.numel() % getSize() != 0) {
      bad_argument(op,
                   "without split sizes, input and output need the same element count, divisible by the group size " +
                       std::to_string(getSize()) + "; got " + std::to_string(input.numel()) + " and " +
                       std::to_string(output.numel()));
    }
    return enqueue(c10d::OpType::ALLTOALL_BASE, op, {out}, [this, in, out, type, n] {
      Dense din = dense_input(in);
      Dense dout = dense_output(out);
      comm_->all_to_all(din.data(), dout.data(), din.count() / n, type);
      dout.finish();
    });
  }
  // Splits count slices along dim 0; an empty list means equal slices.
  auto counts_of = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* which) {
    std::vector<std::size_t> counts(n);
    if (t.dim() == 0)
      bad_argument(op, std::string("the ") + which + " is a scalar; split sizes need a first dimension");
    const std::int64_t rows = t.size(0);
    const std::int64_t row = rows == 0 ? 0 : t.numel() / rows;
    if (splits.empty()) {
      if (rows % getSize() != 0) {
        bad_argument(op, std::string("the ") + which + "'s first dimension " + std::to_string(rows) +
                             " does not divide into " + std::to_string(getSize()) + " equal splits");
      }
      std::fill(counts.begin(), counts.end(), static_cast<std::size_t>(rows / getSize() * row));
      return counts;
    }
    if (splits.size() != n) {
      bad_argument(op, std::string(which) + " split sizes have " + std::to_string(splits.size()) +
                           " entries; expected one per rank (" + std::to_string(n) + ")");
    }
    std::int64_t total = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (splits[i] < 0) bad_argument(op, std::string(which) + " split sizes must not be negative");
      total += splits[i];
      counts[i] = static_cast<std::size_t>(splits[i] * row);
    }
    if (total != rows) {
      bad_argument(op, std::string(which) + " split sizes add up to " + std::to_string(total) +
                           ", not the first dimension " + std::to_string(rows));
    }
    return counts;
  };
  auto send_counts = counts_of(input, input_splits, "input");
  auto recv_counts = counts_of(output, output_splits, "output");
  auto send_displs = displacements(send_counts), recv_displs = displacements(recv_counts);
  return enqueue(c10d::OpType::ALLTOALL_BASE, op, {out},
                 [this, in, out, type, send_counts, recv_counts, send_displs, recv_displs] {
                   Dense din = dense_input(in);
                   Dense dout = dense_output(out);
                   comm_->all_to_allv(din.data(), send_counts, send_displs, dout.data(), recv_counts, recv_displs,
                                      type);
                   dout.finish();
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions&) {
  const char* op = "all_to_all";
  const auto n = static_cast<std::size_t>(getSize());
  if (inputs.size() != n || outputs.size() != n) {
    bad_argument(op, "takes one input and one output tensor per rank (" + std::to_string(n) + "), got " +
                         std::to_string(inputs.size()) + " and " + std::to_string(outputs.size()));
  }
  for (std::size_t i = 0; i < n; ++i) {
    check_tensor(inputs[i], op);
    check_tensor(outputs[i], op);
    check_same_dtype(inputs[i], inputs[0], op, "input");
    check_same_dtype(outputs[i], inputs[0], op, "input and output");
  }
  const DataType type = data_type_of(inputs[0].scalar_type(), op);
  std::vector<std::size_t> send_counts(n), recv_counts(n);
  for (std::size_t i = 0; i < n; ++i) {
    send_counts[i] = static_cast<std::size_t>(inputs[i].numel());
    recv_counts[i] = static_cast<std::size_t>(outputs[i].numel());
  }
  const auto send_displs = displacements(send_counts), recv_displs = displacements(recv_counts);
  std::vector<at::Tensor> ins = inputs, outs = outputs;
  return enqueue(
      c10d::OpType::ALLTOALL, op, outs, [this, ins, outs, type, send_counts, recv_counts, send_displs, recv_displs] {
        at::Tensor in = flatten(ins);
        const std::size_t total = recv_displs.back() + recv_counts.back();
        at::Tensor out = at::empty({static_cast<std::int64_t>(total)}, in.options());
        comm_->all_to_allv(in.data_ptr(), send_counts, send_displs, out.data_ptr(), recv_counts, recv_displs, type);
        unflatten(out, outs);
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::barrier(const c10d::BarrierOptions&) {
  return enqueue(c10d::OpType::BARRIER, "barrier", {}, [this] { comm_->barrier(); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  const char* op = "send";
  check_single(tensors, op);
  at::Tensor t = tensors[0];
  return enqueue(c10d::OpType::SEND, op, {t}, [this, t, dst, tag] { send_tagged(t, dst, tag); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  const char* op = "recv";
  check_single(tensors, op);
  at::Tensor t = tensors[0];
  return enqueue(c10d::OpType::RECV, op, {t}, [this, t, src, tag] { recv_tagged(t, src, tag); });
}

}  // namespace rdmx::torch_backend
