// SPDX-License-Identifier: MIT
// From torch's arguments to rdmx's: element types, reduction operations, and
// dense buffers for tensors rdmx cannot address directly (non-contiguous
// ones). Argument errors are rdmx::Error(InvalidArgument) naming the
// operation, which Python sees as RuntimeError with that message.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <string>
#include <vector>

#include "rdmx/comm.hpp"

namespace rdmx::torch_backend {

// An rdmx::Error(InvalidArgument) "<op>: <message>", for every argument check.
[[noreturn]] void bad_argument(const char* op, const std::string& message, const std::string& hint = "");

// Python's name of a dtype ("torch.int16").
std::string dtype_name(at::ScalarType type);
// rdmx's element type for a torch dtype; bool travels as bytes.
DataType data_type_of(at::ScalarType type, const char* op);
// rdmx's reduction for torch's. Bool sums and products become max and min
// (logical or / and), as NCCL does; AVG needs a floating type.
ReduceOp reduce_op_of(const c10d::ReduceOp& op, at::ScalarType type, const char* op_name);

// Checks shared by every operation: strided, a supported dtype, on the CPU
// or (where the backend is built with CUDA) a CUDA device.
void check_tensor(const at::Tensor& t, const char* op);
// A coalesced call's tensors: at least one, each checked, all of the
// first's dtype and device.
void check_coalesced(const std::vector<at::Tensor>& tensors, const char* op, const char* which);
void check_single(const std::vector<at::Tensor>& tensors, const char* op);
// All tensors of a list have `like`'s dtype, device and element count.
void check_list(const std::vector<at::Tensor>& tensors, const at::Tensor& like, std::size_t expected_size,
                const char* op, const char* which);
void check_root(int root, int size, const char* op);
// The same dtype and device.
void check_same_kind(const at::Tensor& a, const at::Tensor& b, const char* op, const char* what);
// The root's list of a gather or scatter (one list of `size` tensors like
// `like`); other ranks pass none and get an empty vector.
std::vector<at::Tensor> root_list(const std::vector<std::vector<at::Tensor>>& lists, const at::Tensor& like, int root,
                                  int rank, int size, const char* op, const char* which);
// Where each block starts: the exclusive prefix sums of `counts`.
std::vector<std::size_t> displacements(const std::vector<std::size_t>& counts);

// A tensor as rdmx sees it: contiguous memory. `buf` is the caller's tensor
// when it is contiguous (views with a storage offset included), else a dense
// copy (inputs) or a dense scratch tensor written back by finish() (outputs).
struct Dense {
  at::Tensor user;
  at::Tensor buf;
  void* data() const { return buf.data_ptr(); }
  std::size_t count() const { return static_cast<std::size_t>(buf.numel()); }
  void finish() const;  // writes back when buf is a copy
};
Dense dense_input(const at::Tensor& t);
Dense dense_output(const at::Tensor& t);
Dense dense_inout(const at::Tensor& t);

// One flat tensor holding `tensors` one after another (same dtype).
at::Tensor flatten(const std::vector<at::Tensor>& tensors);
// Copies consecutive slices of `flat` back into `tensors`.
void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& tensors);

}  // namespace rdmx::torch_backend
