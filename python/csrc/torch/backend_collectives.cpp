// SPDX-License-Identifier: MIT
// The collectives: torch's arguments checked and described as one
// coll::Call over dense buffers; staged results copied out in the
// call's `then` hook.
#include "backend.hpp"
#include "tensors.hpp"

namespace rdmx::torch_backend {
namespace {

std::int64_t signed_count(std::size_t n) { return static_cast<std::int64_t>(n); }

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  const char* op = "broadcast";
  check_single(tensors, op);
  const int root = static_cast<int>(opts.rootRank);
  check_root(root, getSize(), op);
  const at::Tensor& t = tensors[0];
  Dense d = dense_inout(t);
  auto call = coll::Call::of(CollOp::Broadcast, d.data(), d.data(), d.count(), data_type_of(t.scalar_type(), op),
                             ReduceOp::Sum, root);
  call.then = [d] { d.finish(); };
  return issue(c10d::OpType::BROADCAST, {t}, std::move(call), opts.asyncOp, t);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  const char* op = "all_reduce";
  check_single(tensors, op);
  const at::Tensor& t = tensors[0];
  const ReduceOp redop = reduce_op_of(opts.reduceOp, t.scalar_type(), op);
  Dense d = dense_inout(t);
  auto call =
      coll::Call::of(CollOp::AllReduce, d.data(), d.data(), d.count(), data_type_of(t.scalar_type(), op), redop);
  call.then = [d] { d.finish(); };
  return issue(c10d::OpType::ALLREDUCE, {t}, std::move(call), opts.asyncOp, t);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                     const c10d::AllreduceCoalescedOptions& opts) {
  const char* op = "all_reduce_coalesced";
  check_coalesced(tensors, op, "the tensors");
  const ReduceOp redop = reduce_op_of(opts.reduceOp, tensors[0].scalar_type(), op);
  at::Tensor flat = flatten(tensors);
  auto call = coll::Call::of(CollOp::AllReduce, flat.data_ptr(), flat.data_ptr(),
                             static_cast<std::size_t>(flat.numel()), data_type_of(flat.scalar_type(), op), redop);
  call.then = [flat, tensors] { unflatten(flat, tensors); };
  return issue(c10d::OpType::ALLREDUCE_COALESCED, tensors, std::move(call), opts.asyncOp, flat);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::reduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::ReduceOptions& opts) {
  const char* op = "reduce";
  check_single(tensors, op);
  const int root = static_cast<int>(opts.rootRank);
  check_root(root, getSize(), op);
  const at::Tensor& t = tensors[0];
  const ReduceOp redop = reduce_op_of(opts.reduceOp, t.scalar_type(), op);
  Dense d = dense_inout(t);
  auto call =
      coll::Call::of(CollOp::Reduce, d.data(), d.data(), d.count(), data_type_of(t.scalar_type(), op), redop, root);
  // Held by the hook on every rank: a dense copy of a non-contiguous input
  // is the send buffer until the operation completes.
  call.then = [d, root_here = root == getRank()] {
    if (root_here) d.finish();
  };
  return issue(c10d::OpType::REDUCE, {t}, std::move(call), opts.asyncOp, t);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllgatherOptions& opts) {
  const char* op = "all_gather";
  check_single(inputs, op);
  if (outputs.size() != 1) bad_argument(op, "takes one output list, got " + std::to_string(outputs.size()));
  const at::Tensor& in = inputs[0];
  check_list(outputs[0], in, static_cast<std::size_t>(getSize()), op, "the output list");
  Dense d = dense_input(in);
  at::Tensor flat = at::empty({signed_count(d.count()) * getSize()}, d.buf.options());
  auto call =
      coll::Call::of(CollOp::AllGather, d.data(), flat.data_ptr(), d.count(), data_type_of(in.scalar_type(), op));
  std::vector<at::Tensor> outs = outputs[0];
  call.then = [d, flat, outs] { unflatten(flat, outs); };
  return issue(c10d::OpType::ALLGATHER, outs, std::move(call), opts.asyncOp, in);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                 const c10d::AllgatherOptions& opts) {
  const char* op = "all_gather_into_tensor";
  check_tensor(input, op);
  check_tensor(output, op);
  check_same_kind(input, output, op, "input and output");
  if (output.numel() != input.numel() * getSize()) {
    bad_argument(op, "the output has " + std::to_string(output.numel()) + " elements; expected " +
                         std::to_string(input.numel() * getSize()) + " (the input's " + std::to_string(input.numel()) +
                         " times the group size " + std::to_string(getSize()) + ")");
  }
  Dense din = dense_input(input);
  Dense dout = dense_output(output);
  auto call =
      coll::Call::of(CollOp::AllGather, din.data(), dout.data(), din.count(), data_type_of(input.scalar_type(), op));
  call.then = [din, dout] { dout.finish(); };
  return issue(c10d::OpType::_ALLGATHER_BASE, {output}, std::move(call), opts.asyncOp, input);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::GatherOptions& opts) {
  const char* op = "gather";
  check_single(inputs, op);
  const int root = static_cast<int>(opts.rootRank);
  check_root(root, getSize(), op);
  const at::Tensor& in = inputs[0];
  std::vector<at::Tensor> outs = root_list(outputs, in, root, getRank(), getSize(), op, "the gather list");
  Dense d = dense_input(in);
  at::Tensor flat;
  if (root == getRank()) flat = at::empty({signed_count(d.count()) * getSize()}, d.buf.options());
  auto call = coll::Call::of(CollOp::Gather, d.data(), flat.defined() ? flat.data_ptr() : nullptr, d.count(),
                             data_type_of(in.scalar_type(), op), ReduceOp::Sum, root);
  call.then = [d, flat, outs] {
    if (flat.defined()) unflatten(flat, outs);
  };
  return issue(c10d::OpType::GATHER, outs, std::move(call), opts.asyncOp, in);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::scatter(std::vector<at::Tensor>& outputs,
                                                         std::vector<std::vector<at::Tensor>>& inputs,
                                                         const c10d::ScatterOptions& opts) {
  const char* op = "scatter";
  check_single(outputs, op);
  const int root = static_cast<int>(opts.rootRank);
  check_root(root, getSize(), op);
  const at::Tensor& out = outputs[0];
  std::vector<at::Tensor> ins = root_list(inputs, out, root, getRank(), getSize(), op, "the scatter list");
  Dense d = dense_output(out);
  at::Tensor flat;
  if (!ins.empty()) flat = flatten(ins);
  auto call = coll::Call::of(CollOp::Scatter, flat.defined() ? flat.data_ptr() : nullptr, d.data(), d.count(),
                             data_type_of(out.scalar_type(), op), ReduceOp::Sum, root);
  call.then = [d, flat] { d.finish(); };
  return issue(c10d::OpType::SCATTER, {out}, std::move(call), opts.asyncOp, out);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                                const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter";
  check_single(outputs, op);
  if (inputs.size() != 1) bad_argument(op, "takes one input list, got " + std::to_string(inputs.size()));
  const at::Tensor& out = outputs[0];
  check_list(inputs[0], out, static_cast<std::size_t>(getSize()), op, "the input list");
  const ReduceOp redop = reduce_op_of(opts.reduceOp, out.scalar_type(), op);
  at::Tensor flat = flatten(inputs[0]);
  Dense d = dense_output(out);
  auto call = coll::Call::of(CollOp::ReduceScatter, flat.data_ptr(), d.data(), d.count(),
                             data_type_of(out.scalar_type(), op), redop);
  call.then = [flat, d] { d.finish(); };
  return issue(c10d::OpType::REDUCE_SCATTER, {out}, std::move(call), opts.asyncOp, out);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                      const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter_tensor";
  check_tensor(input, op);
  check_tensor(output, op);
  check_same_kind(input, output, op, "input and output");
  if (input.numel() != output.numel() * getSize()) {
    bad_argument(op, "the input has " + std::to_string(input.numel()) + " elements; expected " +
                         std::to_string(output.numel() * getSize()) + " (the output's " +
                         std::to_string(output.numel()) + " times the group size " + std::to_string(getSize()) + ")");
  }
  const ReduceOp redop = reduce_op_of(opts.reduceOp, output.scalar_type(), op);
  Dense din = dense_input(input);
  Dense dout = dense_output(output);
  auto call = coll::Call::of(CollOp::ReduceScatter, din.data(), dout.data(), dout.count(),
                             data_type_of(output.scalar_type(), op), redop);
  call.then = [din, dout] { dout.finish(); };
  return issue(c10d::OpType::_REDUCE_SCATTER_BASE, {output}, std::move(call), opts.asyncOp, output);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                               std::vector<int64_t>& output_splits,
                                                               std::vector<int64_t>& input_splits,
                                                               const c10d::AllToAllOptions& opts) {
  const char* op = "all_to_all_single";
  check_tensor(input, op);
  check_tensor(output, op);
  check_same_kind(input, output, op, "input and output");
  const DataType type = data_type_of(input.scalar_type(), op);
  const auto n = static_cast<std::size_t>(getSize());
  Dense din = dense_input(input);
  Dense dout = dense_output(output);
  if (output_splits.empty() && input_splits.empty()) {
    if (input.numel() != output.numel() || input.numel() % getSize() != 0) {
      bad_argument(op,
                   "without split sizes, input and output need the same element count, divisible by the group size " +
                       std::to_string(getSize()) + "; got " + std::to_string(input.numel()) + " and " +
                       std::to_string(output.numel()));
    }
    auto call = coll::Call::of(CollOp::AllToAll, din.data(), dout.data(), din.count() / n, type);
    call.then = [din, dout] { dout.finish(); };
    return issue(c10d::OpType::ALLTOALL_BASE, {output}, std::move(call), opts.asyncOp, input);
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
  auto call = coll::Call::of(CollOp::AllToAllv, din.data(), dout.data(), 0, type);
  call.send_counts = counts_of(input, input_splits, "input");
  call.recv_counts = counts_of(output, output_splits, "output");
  call.send_displs = displacements(call.send_counts);
  call.recv_displs = displacements(call.recv_counts);
  call.then = [din, dout] { dout.finish(); };
  return issue(c10d::OpType::ALLTOALL_BASE, {output}, std::move(call), opts.asyncOp, input);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions& opts) {
  const char* op = "all_to_all";
  const auto n = static_cast<std::size_t>(getSize());
  if (inputs.size() != n || outputs.size() != n) {
    bad_argument(op, "takes one input and one output tensor per rank (" + std::to_string(n) + "), got " +
                         std::to_string(inputs.size()) + " and " + std::to_string(outputs.size()));
  }
  for (std::size_t i = 0; i < n; ++i) {
    check_tensor(inputs[i], op);
    check_tensor(outputs[i], op);
    check_same_kind(inputs[i], inputs[0], op, "input");
    check_same_kind(outputs[i], inputs[0], op, "input and output");
  }
  std::vector<std::size_t> send_counts(n), recv_counts(n);
  for (std::size_t i = 0; i < n; ++i) {
    send_counts[i] = static_cast<std::size_t>(inputs[i].numel());
    recv_counts[i] = static_cast<std::size_t>(outputs[i].numel());
  }
  at::Tensor in = flatten(inputs);
  const std::vector<std::size_t> recv_displs = displacements(recv_counts);
  at::Tensor out = at::empty({signed_count(recv_displs.back() + recv_counts.back())}, in.options());
  auto call = coll::Call::of(CollOp::AllToAllv, in.data_ptr(), out.data_ptr(), 0, data_type_of(in.scalar_type(), op));
  call.send_displs = displacements(send_counts);
  call.send_counts = std::move(send_counts);
  call.recv_counts = std::move(recv_counts);
  call.recv_displs = recv_displs;
  std::vector<at::Tensor> outs = outputs;
  call.then = [in, out, outs] { unflatten(out, outs); };
  return issue(c10d::OpType::ALLTOALL, outs, std::move(call), opts.asyncOp, in);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::barrier(const c10d::BarrierOptions& opts) {
  return issue(c10d::OpType::BARRIER, {}, coll::Call::of(CollOp::Barrier, nullptr, nullptr, 0, DataType::Uint8),
               opts.asyncOp, at::Tensor());
}

}  // namespace rdmx::torch_backend
