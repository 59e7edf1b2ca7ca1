// SPDX-License-Identifier: MIT
// Names and sizes of the public collective enums.
#include "rdmx/comm.hpp"

namespace rdmx {

std::size_t size_of(DataType type) noexcept {
  switch (type) {
    case DataType::Int8:
    case DataType::Uint8: return 1;
    case DataType::Float16:
    case DataType::BFloat16: return 2;
    case DataType::Int32:
    case DataType::Uint32:
    case DataType::Float32: return 4;
    case DataType::Int64:
    case DataType::Uint64:
    case DataType::Float64: return 8;
  }
  return 0;
}

const char* to_string(DataType type) noexcept {
  switch (type) {
    case DataType::Int8: return "int8";
    case DataType::Uint8: return "uint8";
    case DataType::Int32: return "int32";
    case DataType::Uint32: return "uint32";
    case DataType::Int64: return "int64";
    case DataType::Uint64: return "uint64";
    case DataType::Float16: return "fp16";
    case DataType::BFloat16: return "bf16";
    case DataType::Float32: return "fp32";
    case DataType::Float64: return "fp64";
  }
  return "?";
}

bool is_floating(DataType type) noexcept {
  return type == DataType::Float16 || type == DataType::BFloat16 || type == DataType::Float32 ||
         type == DataType::Float64;
}

const char* to_string(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Prod: return "prod";
    case ReduceOp::Min: return "min";
    case ReduceOp::Max: return "max";
    case ReduceOp::Avg: return "avg";
  }
  return "?";
}

const char* to_string(CollOp op) noexcept {
  switch (op) {
    case CollOp::AllReduce: return "all_reduce";
    case CollOp::AllGather: return "all_gather";
    case CollOp::ReduceScatter: return "reduce_scatter";
    case CollOp::Broadcast: return "broadcast";
    case CollOp::Reduce: return "reduce";
    case CollOp::AllToAll: return "all_to_all";
    case CollOp::AllToAllv: return "all_to_allv";
    case CollOp::Gather: return "gather";
    case CollOp::Scatter: return "scatter";
    case CollOp::Barrier: return "barrier";
    case CollOp::Send: return "send";
    case CollOp::Recv: return "recv";
    case CollOp::SendRecv: return "send_recv";
  }
  return "?";
}

}  // namespace rdmx
