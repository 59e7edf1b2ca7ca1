// SPDX-License-Identifier: MIT
#include "services/cuda/copy.hpp"

#include <cstdint>
#include <string>

#include "services/cuda/context.hpp"
#include "services/cuda/driver.hpp"
#include "services/cuda/per_gpu.hpp"

namespace rdmx::core::cuda {
namespace {

CUstream stream_for(const DriverApi& api, int device, const ErrorContext& where) {
  static PerGpu<CUstream> streams;
  return streams.get(device, where.op.c_str(), [&] {
    CUstream stream = nullptr;
    check(api, api.cuStreamCreate(&stream, kStreamNonBlocking), "cuStreamCreate", where);
    return stream;
  });
}

CUdeviceptr as_address(const void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)); }

}  // namespace

void copy_memory(void* dst, const void* src, std::size_t bytes, int device, const char* op) {
  if (bytes == 0) return;
  const DriverApi& api = require_driver(op);
  const ErrorContext where{.op = op, .sizes = std::to_string(bytes) + " B on gpu " + std::to_string(device)};
  ContextScope scope(api, primary_context(api, device));
  const CUstream stream = stream_for(api, device, where);
  check(api, api.cuMemcpyAsync(as_address(dst), as_address(src), bytes, stream), "cuMemcpyAsync", where);
  check(api, api.cuStreamSynchronize(stream), "cuStreamSynchronize", where);
}

}  // namespace rdmx::core::cuda
