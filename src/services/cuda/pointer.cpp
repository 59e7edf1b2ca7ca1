// SPDX-License-Identifier: MIT
#include "services/cuda/pointer.hpp"

#include <cstdio>
#include <string>

#include "services/cuda/context.hpp"
#include "services/cuda/driver.hpp"

namespace rdmx::core::cuda {

PointerInfo classify(const void* addr, std::size_t length, const char* op) {
  PointerInfo info;
  const DriverApi* api = driver_if_loaded();
  if (api == nullptr || addr == nullptr) return info;
  unsigned memory_type = 0;
  unsigned long long buffer_id = 0;
  int device = -1;
  int is_managed = 0;
  int legacy_ipc = 0;
  unsigned long long handle_types = 0;
  int attributes[] = {kPointerMemoryType, kPointerBufferId,           kPointerDeviceOrdinal,
                      kPointerIsManaged,  kPointerIsLegacyIpcCapable, kPointerAllowedHandleTypes};
  void* values[] = {&memory_type, &buffer_id, &device, &is_managed, &legacy_ipc, &handle_types};
  const auto pointer = static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(addr));
  // Unlike cuPointerGetAttribute, this succeeds for memory CUDA does not
  // know, leaving the type 0; a context not yet initialised means the same.
  const CUresult result =
      api->cuPointerGetAttributes(sizeof attributes / sizeof attributes[0], attributes, values, pointer);
  if (result != kSuccess || memory_type != kMemoryTypeDevice || is_managed != 0) return info;
  info.type = MemoryType::Cuda;
  info.device = device;
  info.buffer_id = buffer_id;
  info.legacy_ipc = legacy_ipc != 0;
  info.handle_types = handle_types;
  // The mapped allocation, not the reserved range the pointer attributes
  // give for cuMemMap'd memory.
  // Unlike the attributes, this needs a current context (the calling thread
  // may never have used CUDA).
  CUdeviceptr base = 0;
  std::size_t size = 0;
  ContextScope scope(*api, primary_context(*api, device));
  if (api->cuMemGetAddressRange_v2(&base, &size, pointer) == kSuccess) {
    info.allocation_base = base;
    info.allocation_length = size;
  }
  const std::uint64_t start = reinterpret_cast<std::uintptr_t>(addr);
  if (info.allocation_length == 0 || start - info.allocation_base > info.allocation_length ||
      length > info.allocation_length - (start - info.allocation_base)) {
    char sizes[160];
    std::snprintf(sizes, sizeof sizes, "addr=%p length=%zu allocation=[0x%llx,+%llu) gpu=%d", addr, length,
                  static_cast<unsigned long long>(info.allocation_base),
                  static_cast<unsigned long long>(info.allocation_length), device);
    throw Error(ErrorCode::InvalidArgument, "the range runs past the end of the CUDA allocation it starts in",
                {.op = op, .sizes = sizes, .hint = "register a range inside one cudaMalloc/cuMemCreate allocation"});
  }
  return info;
}

}  // namespace rdmx::core::cuda
