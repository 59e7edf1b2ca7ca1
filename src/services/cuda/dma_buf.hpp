// SPDX-License-Identifier: MIT
// Device memory as a dma-buf, for an RDMA NIC to register directly
// (GPUDirect RDMA through ibv_reg_dmabuf_mr): the NIC then reads and writes
// GPU memory over PCIe with no host copy.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rdmx::core::cuda {

struct DmaBuf {
  int fd = -1;               // the caller closes it once registered
  std::uint64_t offset = 0;  // where the range starts within the dma-buf
};

// A dma-buf covering [addr, addr + length) of device memory on GPU `device`:
// the driver exports whole host pages, so the range is widened to page
// bounds (within its allocation) and `offset` says where it starts. Throws
// NotSupported naming why (a driver older than CUDA 11.7, a GPU or kernel
// module without dma-buf export), InvalidArgument for a range outside one
// allocation.
DmaBuf export_dma_buf(const void* addr, std::size_t length, int device, const char* op);

}  // namespace rdmx::core::cuda
