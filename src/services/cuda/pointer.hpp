// SPDX-License-Identifier: MIT
// What memory a pointer refers to, asked of the CUDA driver when the process
// runs one: host memory (also pinned host memory and managed memory, which
// the CPU may touch directly) or device memory of one GPU, and the whole
// allocation it lies in, since a caching allocator (PyTorch's) hands out
// pointers inside larger allocations, and sharing works per allocation.
#pragma once

#include <cstddef>
#include <cstdint>

#include "rdmx/verbs.hpp"

namespace rdmx::core::cuda {

struct PointerInfo {
  MemoryType type = MemoryType::Host;
  int device = -1;                      // GPU ordinal of device memory
  std::uint64_t allocation_base = 0;    // the allocation holding the pointer
  std::uint64_t allocation_length = 0;  //
  std::uint64_t buffer_id = 0;          // unique in the process for each allocation
  bool legacy_ipc = false;              // cudaMalloc-style memory: cuIpcGetMemHandle works on it
  std::uint64_t handle_types = 0;       // cuMemCreate memory: the export handle types it allows
};

// Classifies [addr, addr + length). Throws InvalidArgument naming the
// allocation when device memory runs past the end of its allocation.
// Without a loaded driver everything is host memory, and no driver is loaded.
PointerInfo classify(const void* addr, std::size_t length, const char* op);

}  // namespace rdmx::core::cuda
