// SPDX-License-Identifier: MIT
// The coalesced forms FSDP2 and torch's coalescing manager issue: several
// tensors, one Communicator call over one staging buffer laid out as the
// operation needs it, results copied back in the call's `then` hook.
#include "backend.hpp"
#include "tensors.hpp"

namespace rdmx::torch_backend {
namespace {

// Where each tensor starts in a flat concatenation of `tensors`, and the total.
std::vector<std::int64_t> offsets_of(const std::vector<at::Tensor>& tensors, std::int64_t& total) {
  std::vector<std::int64_t> offsets;
  total = 0;
  for (const auto& t : tensors) {
    offsets.push_back(total);
    total += t.numel();
  }
  return offsets;
}

// Where output k's blocks are gathered: the output itself (flattened) when
// that is a view of it, else a dense scratch tensor, made at the call so
// that nothing is allocated while the operation holds the caller's stream.
std::vector<at::Tensor> gather_targets(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
                                       int ranks) {
  std::vector<at::Tensor> targets;
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    at::Tensor out = outputs[k].reshape({-1});
    const bool view = out.is_contiguous() && out.data_ptr() == outputs[k].data_ptr();
    targets.push_back(view ? out : at::empty({inputs[k].numel() * ranks}, inputs[k].options()));
  }
  return targets;
}

// The all-gathered buffer (rank r's inputs at r * total) into the outputs:
// output k, block r = rank r's input k.
void scatter_gathered(const at::Tensor& flat, const std::vector<std::int64_t>& offsets, std::int64_t total,
                      const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
                      const std::vector<at::Tensor>& targets, int ranks) {
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    const std::int64_t n = inputs[k].numel();
    const at::Tensor& target = targets[k];
    for (int r = 0; r < ranks; ++r) target.narrow(0, r * n, n).copy_(flat.narrow(0, r * total + offsets[k], n));
    if (!target.is_alias_of(outputs[k])) outputs[k].copy_(target.view(outputs[k].sizes()));
  }
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                                 std::vector<at::Tensor>& inputs,
                                                                                 const c10d::AllgatherOptions& opts) {
  const char* op = "all_gather_into_tensor_coalesced";
  check_coalesced(inputs, op, "the inputs");
  if (outputs.size() != inputs.size()) {
    bad_argument(op, "got " + std::to_string(inputs.size()) + " inputs and " + std::to_string(outputs.size()) +
                         " outputs; expected one output per input");
  }
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    check_tensor(outputs[k], op);
    check_same_kind(inputs[k], outputs[k], op, "input and output");
    if (outputs[k].numel() != inputs[k].numel() * getSize()) {
      bad_argument(op, "output " + std::to_string(k) + " has " + std::to_string(outputs[k].numel()) +
                           " elements; expected " + std::to_string(inputs[k].numel() * getSize()) +
                           " (its input's times the group size " + std::to_string(getSize()) + ")");
    }
  }
  std::int64_t total = 0;
  auto offsets = offsets_of(inputs, total);
  at::Tensor in = flatten(inputs);
  at::Tensor flat = at::empty({total * getSize()}, in.options());
  auto call = coll::Call::of(CollOp::AllGather, in.data_ptr(), flat.data_ptr(), static_cast<std::size_t>(total),
                             data_type_of(in.scalar_type(), op));
  const int ranks = getSize();
  std::vector<at::Tensor> targets = gather_targets(inputs, outputs, ranks);
  call.then = [in, flat, offsets, total, inputs, outputs, targets, ranks] {
    scatter_gathered(flat, offsets, total, inputs, outputs, targets, ranks);
  };
  return issue(c10d::OpType::COALESCED, outputs, std::move(call), opts.asyncOp, in);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                     std::vector<at::Tensor>& inputs,
                                                                     const c10d::AllgatherOptions& opts) {
  const char* op = "all_gather_coalesced";
  check_coalesced(inputs, op, "the inputs");
  if (outputs.size() != static_cast<std::size_t>(getSize())) {
    bad_argument(op, "takes one output list per rank (" + std::to_string(getSize()) + "), got " +
                         std::to_string(outputs.size()));
  }
  std::vector<at::Tensor> flat_outputs;
  for (std::size_t r = 0; r < outputs.size(); ++r) {
    if (outputs[r].size() != inputs.size()) {
      bad_argument(op, "output list " + std::to_string(r) + " holds " + std::to_string(outputs[r].size()) +
                           " tensors; expected one per input (" + std::to_string(inputs.size()) + ")");
    }
    for (std::size_t k = 0; k < inputs.size(); ++k) {
      check_tensor(outputs[r][k], op);
      check_same_kind(inputs[k], outputs[r][k], op, "input and output");
      if (outputs[r][k].numel() != inputs[k].numel()) {
        bad_argument(op, "output [" + std::to_string(r) + "][" + std::to_string(k) + "] has " +
                             std::to_string(outputs[r][k].numel()) + " elements, not its input's " +
                             std::to_string(inputs[k].numel()));
      }
      flat_outputs.push_back(outputs[r][k]);
    }
  }
  // Rank r's inputs land at r * total, in input order: the outputs in rank-major order.
  at::Tensor in = flatten(inputs);
  at::Tensor flat = at::empty({in.numel() * getSize()}, in.options());
  auto call = coll::Call::of(CollOp::AllGather, in.data_ptr(), flat.data_ptr(), static_cast<std::size_t>(in.numel()),
                             data_type_of(in.scalar_type(), op));
  call.then = [in, flat, flat_outputs] { unflatten(flat, flat_outputs); };
  return issue(c10d::OpType::ALLGATHER_COALESCED, flat_outputs, std::move(call), opts.asyncOp, in);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter_tensor_coalesced";
  check_coalesced(outputs, op, "the outputs");
  if (outputs.size() != inputs.size()) {
    bad_argument(op, "got " + std::to_string(inputs.size()) + " inputs and " + std::to_string(outputs.size()) +
                         " outputs; expected one output per input");
  }
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    check_tensor(inputs[k], op);
    check_same_kind(inputs[k], outputs[k], op, "input and output");
    if (inputs[k].numel() != outputs[k].numel() * getSize()) {
      bad_argument(op, "input " + std::to_string(k) + " has " + std::to_string(inputs[k].numel()) +
                           " elements; expected " + std::to_string(outputs[k].numel() * getSize()) +
                           " (its output's times the group size " + std::to_string(getSize()) + ")");
    }
  }
  const ReduceOp redop = reduce_op_of(opts.reduceOp, outputs[0].scalar_type(), op);
  std::int64_t total = 0;
  auto offsets = offsets_of(outputs, total);
  // Block r of the staging input holds, for every tensor k, input k's block r.
  at::Tensor in = at::empty({total * getSize()}, outputs[0].options().memory_format(at::MemoryFormat::Contiguous));
  for (int r = 0; r < getSize(); ++r) {
    for (std::size_t k = 0; k < inputs.size(); ++k) {
      const std::int64_t m = outputs[k].numel();
      in.narrow(0, r * total + offsets[k], m).copy_(inputs[k].reshape({-1}).narrow(0, r * m, m));
    }
  }
  at::Tensor flat = at::empty({total}, in.options());
  auto call = coll::Call::of(CollOp::ReduceScatter, in.data_ptr(), flat.data_ptr(), static_cast<std::size_t>(total),
                             data_type_of(in.scalar_type(), op), redop);
  call.then = [in, flat, outputs] { unflatten(flat, outputs); };
  return issue(c10d::OpType::COALESCED, outputs, std::move(call), opts.asyncOp, in);
}

}  // namespace rdmx::torch_backend
