// SPDX-License-Identifier: MIT
// CUDA device memory shared between processes on one host, so that a peer
// copies into or out of it on the GPU's copy engines instead of through host
// memory. Two kinds, as the allocation was made:
// - cudaMalloc-style memory: a legacy IPC handle (64 bytes, cuIpcGetMemHandle);
// - cuMemCreate memory created exportable as a POSIX file descriptor (as
//   NCCL's and PyTorch's expandable segments are): the descriptor, which
//   travels beside the description over a Unix socket (SCM_RIGHTS), then is
//   imported and mapped into a reserved range.
// A legacy handle cannot be opened by the process that exported it, and
// only once per process: callers keep one import per (peer, allocation).
#pragma once

#include <cstdint>
#include <memory>

#include "services/cuda/driver_api.hpp"
#include "services/cuda/pointer.hpp"

namespace rdmx::core::cuda {

// What a peer needs to open an allocation: fixed size, to travel in messages.
struct SharedMemoryHandle {
  static constexpr std::uint32_t kLegacy = 1;
  static constexpr std::uint32_t kPosixFd = 2;
  std::uint32_t kind = 0;
  std::uint32_t reserved = 0;
  std::uint64_t size = 0;       // bytes of the allocation
  std::uint64_t buffer_id = 0;  // the exporter's id of the allocation
  char bus_id[16] = {};         // the GPU's PCI bus id: ordinals differ between processes
  CUipcMemHandle legacy{};      // kLegacy
};
static_assert(sizeof(SharedMemoryHandle) == 104);

// Describes the allocation `info` (classify()) for a peer; for kPosixFd
// also returns a new descriptor in *fd, which the caller sends and closes.
// Throws NotSupported naming the reason when the allocation cannot be
// shared (a cuMemCreate allocation made without a POSIX descriptor handle type).
SharedMemoryHandle export_memory(const PointerInfo& info, int* fd, const char* op);

// A peer's allocation, opened in this process; closed on destruction.
class ImportedMemory {
 public:
  // Opens `handle` (with `fd` for kPosixFd, which it closes); throws with
  // the driver's reason when it cannot.
  ImportedMemory(const SharedMemoryHandle& handle, int fd, const char* op);
  ~ImportedMemory();
  ImportedMemory(const ImportedMemory&) = delete;
  ImportedMemory& operator=(const ImportedMemory&) = delete;

  // Where the allocation's first byte lies in this process.
  char* base() const { return reinterpret_cast<char*>(static_cast<std::uintptr_t>(base_)); }
  std::uint64_t size() const { return size_; }
  int device() const { return device_; }

 private:
  std::uint32_t kind_;
  CUdeviceptr base_ = 0;
  std::uint64_t size_;
  CUdeviceptr reserved_ = 0;  // kPosixFd: the reserved range
  int device_ = -1;
};

// The one import of (peer process, allocation) in this process, shared by
// every user (a legacy handle opens only once per process) and closed when
// the last one lets go. Takes `fd` as ImportedMemory does (closed on a hit).
std::shared_ptr<ImportedMemory> import_shared(int peer_pid, const SharedMemoryHandle& handle, int fd, const char* op);

}  // namespace rdmx::core::cuda
