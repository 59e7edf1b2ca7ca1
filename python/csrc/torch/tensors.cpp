// SPDX-License-Identifier: MIT
#include "tensors.hpp"

#include <c10/util/Exception.h>

#include <numeric>

namespace rdmx::torch_backend {
namespace {

const char* kSupported = "float32, float64, float16, bfloat16, int8, uint8, int32, int64 and bool";

}  // namespace

void bad_argument(const char* op, const std::string& message, const std::string& hint) {
  throw Error(ErrorCode::InvalidArgument, std::string(op) + ": " + message, {.op = op, .hint = hint});
}

// Python's spelling (torch.int16), not c10's (Short).
std::string dtype_name(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return "torch.float32";
    case at::kDouble: return "torch.float64";
    case at::kHalf: return "torch.float16";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kChar: return "torch.int8";
    case at::kByte: return "torch.uint8";
    case at::kShort: return "torch.int16";
    case at::kInt: return "torch.int32";
    case at::kLong: return "torch.int64";
    case at::kBool: return "torch.bool";
    case at::kComplexHalf: return "torch.complex32";
    case at::kComplexFloat: return "torch.complex64";
    case at::kComplexDouble: return "torch.complex128";
    default: return std::string("torch.") + c10::toString(type);
  }
}

DataType data_type_of(at::ScalarType type, const char* op) {
  switch (type) {
    case at::kFloat: return DataType::Float32;
    case at::kDouble: return DataType::Float64;
    case at::kHalf: return DataType::Float16;
    case at::kBFloat16: return DataType::BFloat16;
    case at::kChar: return DataType::Int8;
    case at::kByte: return DataType::Uint8;
    case at::kBool: return DataType::Uint8;
    case at::kInt: return DataType::Int32;
    case at::kLong: return DataType::Int64;
    default:
      bad_argument(
          op, "dtype " + dtype_name(type) + " is not supported by the rdmx backend",
          std::string("rdmx reduces and moves ") + kSupported + "; convert the tensor, e.g. .to(torch.float32)");
  }
}

ReduceOp reduce_op_of(const c10d::ReduceOp& op, at::ScalarType type, const char* op_name) {
  const bool is_bool = type == at::kBool;
  switch (static_cast<c10d::ReduceOp::RedOpType>(op)) {
    case c10d::ReduceOp::SUM: return is_bool ? ReduceOp::Max : ReduceOp::Sum;
    case c10d::ReduceOp::PRODUCT: return is_bool ? ReduceOp::Min : ReduceOp::Prod;
    case c10d::ReduceOp::MIN: return ReduceOp::Min;
    case c10d::ReduceOp::MAX: return ReduceOp::Max;
    case c10d::ReduceOp::AVG:
      if (!at::isFloatingType(type)) {
        bad_argument(op_name, "ReduceOp.AVG needs a floating dtype, not " + dtype_name(type),
                     "use ReduceOp.SUM and divide, or a floating dtype");
      }
      return ReduceOp::Avg;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
    case c10d::ReduceOp::PREMUL_SUM:
    default:
      bad_argument(
          op_name, "this ReduceOp is not supported by the rdmx backend",
          "rdmx reduces with SUM, PRODUCT, MIN, MAX and AVG (bitwise operations and PREMUL_SUM are not provided)");
  }
}

void check_tensor(const at::Tensor& t, const char* op) {
  if (!t.defined()) bad_argument(op, "got an undefined tensor");
#ifdef RDMX_TORCH_CUDA
  if (!t.device().is_cpu() && !t.device().is_cuda()) {
    bad_argument(op, "tensor is on " + t.device().str() + "; the rdmx backend takes CPU and CUDA tensors",
                 "move it with .cpu()");
  }
#else
  if (!t.device().is_cpu()) {
    bad_argument(
        op, "tensor is on " + t.device().str() + "; this rdmx backend was built without CUDA and takes CPU tensors",
        "move it with .cpu(), or build rdmx against a CUDA build of torch");
  }
#endif
  if (t.layout() != at::kStrided) bad_argument(op, "sparse and other non-strided tensors are not supported");
  (void)data_type_of(t.scalar_type(), op);
}

void check_single(const std::vector<at::Tensor>& tensors, const char* op) {
  if (tensors.size() != 1) {
    bad_argument(op, "takes one tensor per call, got " + std::to_string(tensors.size()),
                 "one tensor per process (multi-device lists are for CUDA backends)");
  }
  check_tensor(tensors[0], op);
}

void check_list(const std::vector<at::Tensor>& tensors, const at::Tensor& like, std::size_t expected_size,
                const char* op, const char* which) {
  if (tensors.size() != expected_size) {
    bad_argument(op, std::string(which) + " holds " + std::to_string(tensors.size()) + " tensors; expected " +
                         std::to_string(expected_size) + " (one per rank of the group)");
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    check_tensor(tensors[i], op);
    if (tensors[i].device() != like.device()) {
      bad_argument(op, std::string(which) + "[" + std::to_string(i) + "] is on " + tensors[i].device().str() +
                           ", not " + like.device().str());
    }
    if (tensors[i].scalar_type() != like.scalar_type()) {
      bad_argument(op, std::string(which) + "[" + std::to_string(i) + "] is " + dtype_name(tensors[i].scalar_type()) +
                           ", not " + dtype_name(like.scalar_type()));
    }
    if (tensors[i].numel() != like.numel()) {
      bad_argument(op, std::string(which) + "[" + std::to_string(i) + "] has " + std::to_string(tensors[i].numel()) +
                           " elements, not " + std::to_string(like.numel()));
    }
  }
}

void check_root(int root, int size, const char* op) {
  if (root < 0 || root >= size) {
    bad_argument(op,
                 "root " + std::to_string(root) + " is not a rank of this group (size " + std::to_string(size) + ")");
  }
}

void check_same_kind(const at::Tensor& a, const at::Tensor& b, const char* op, const char* what) {
  if (a.scalar_type() != b.scalar_type()) {
    bad_argument(op, std::string(what) + " dtypes differ (" + dtype_name(a.scalar_type()) + " and " +
                         dtype_name(b.scalar_type()) + ")");
  }
  if (a.device() != b.device()) {
    bad_argument(
        op, std::string(what) + " are on different devices (" + a.device().str() + " and " + b.device().str() + ")",
        "one operation's tensors must all be on one device");
  }
}

void check_coalesced(const std::vector<at::Tensor>& tensors, const char* op, const char* which) {
  if (tensors.empty()) bad_argument(op, std::string("got no tensors in ") + which);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    check_tensor(tensors[i], op);
    check_same_kind(tensors[i], tensors[0], op, which);
  }
}

std::vector<at::Tensor> root_list(const std::vector<std::vector<at::Tensor>>& lists, const at::Tensor& like, int root,
                                  int rank, int size, const char* op, const char* which) {
  if (root != rank) {
    if (!lists.empty() && !lists[0].empty()) {
      bad_argument(op, "only the root (rank " + std::to_string(root) + ") passes " + which);
    }
    return {};
  }
  if (lists.size() != 1) bad_argument(op, std::string("the root takes one list, got ") + std::to_string(lists.size()));
  check_list(lists[0], like, static_cast<std::size_t>(size), op, which);
  return lists[0];
}

std::vector<std::size_t> displacements(const std::vector<std::size_t>& counts) {
  std::vector<std::size_t> displs(counts.size());
  std::exclusive_scan(counts.begin(), counts.end(), displs.begin(), std::size_t{0});
  return displs;
}

void Dense::finish() const {
  if (!buf.is_same(user)) user.copy_(buf);
}

Dense dense_input(const at::Tensor& t) { return {t, t.contiguous()}; }

Dense dense_output(const at::Tensor& t) {
  return {t, t.is_contiguous() ? t : at::empty(t.sizes(), t.options().memory_format(at::MemoryFormat::Contiguous))};
}

Dense dense_inout(const at::Tensor& t) { return {t, t.contiguous()}; }

at::Tensor flatten(const std::vector<at::Tensor>& tensors) {
  std::int64_t total = 0;
  for (const auto& t : tensors) total += t.numel();
  at::Tensor flat = at::empty({total}, tensors.front().options().memory_format(at::MemoryFormat::Contiguous));
  std::int64_t offset = 0;
  for (const auto& t : tensors) {
    flat.narrow(0, offset, t.numel()).copy_(t.reshape({-1}));
    offset += t.numel();
  }
  return flat;
}

void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& tensors) {
  std::int64_t offset = 0;
  for (const auto& t : tensors) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

}  // namespace rdmx::torch_backend
