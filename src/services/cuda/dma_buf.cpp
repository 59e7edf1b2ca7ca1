// SPDX-License-Identifier: MIT
#include "services/cuda/dma_buf.hpp"

#include <unistd.h>

#include <cstdio>
#include <string>

#include "services/cuda/context.hpp"
#include "services/cuda/driver.hpp"
#include "services/cuda/pointer.hpp"

namespace rdmx::core::cuda {

DmaBuf export_dma_buf(const void* addr, std::size_t length, int device, const char* op) {
  const DriverApi& api = require_driver(op);
  char sizes[96];
  std::snprintf(sizes, sizeof sizes, "addr=%p length=%zu gpu=%d", addr, length, device);
  if (api.cuMemGetHandleForAddressRange == nullptr) {
    throw Error(
        ErrorCode::NotSupported, "this CUDA driver cannot export device memory as a dma-buf",
        {.op = op, .sizes = sizes, .hint = "GPUDirect RDMA through dma-buf needs a driver of CUDA 11.7 or later"});
  }
  const PointerInfo info = classify(addr, length == 0 ? 1 : length, op);
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uint64_t>(addr);
  const std::uint64_t first = begin / page * page;
  const std::uint64_t end = (begin + length + page - 1) / page * page;
  if (first < info.allocation_base || end > info.allocation_base + info.allocation_length) {
    throw Error(ErrorCode::NotSupported,
                "the page-aligned range around the buffer leaves its allocation, and a dma-buf covers whole pages",
                {.op = op, .sizes = sizes, .hint = "register page-aligned device memory (cudaMalloc's is)"});
  }
  ContextScope scope(api, primary_context(api, device));
  int fd = -1;
  const CUresult result =
      api.cuMemGetHandleForAddressRange(&fd, static_cast<CUdeviceptr>(first), end - first, kRangeHandleDmaBufFd, 0);
  if (result != kSuccess) {
    throw Error(ErrorCode::NotSupported,
                "the CUDA driver would not export the buffer as a dma-buf: " + describe(api, result),
                {.op = op,
                 .sizes = sizes,
                 .hint = "dma-buf export needs a GPU that reports it (rdmx info: dma_buf) and NVIDIA's open kernel "
                         "modules; otherwise use tcp or shm, which stage device memory"});
  }
  return {fd, begin - first};
}

}  // namespace rdmx::core::cuda
