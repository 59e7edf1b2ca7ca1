// SPDX-License-Identifier: MIT
#include "services/cuda/ipc.hpp"

#include <unistd.h>

#include <cstring>
#include <map>
#include <string>

#include "services/cuda/context.hpp"
#include "services/cuda/driver.hpp"
#include "services/log.hpp"
#include "services/mutex.hpp"

namespace rdmx::core::cuda {

namespace {

std::string sizes_of(const SharedMemoryHandle& handle) {
  return "allocation=" + std::to_string(handle.size) +
         " B gpu=" + std::string(handle.bus_id, strnlen(handle.bus_id, 16));
}

}  // namespace

SharedMemoryHandle export_memory(const PointerInfo& info, int* fd, const char* op) {
  const DriverApi& api = require_driver(op);
  SharedMemoryHandle handle;
  handle.size = info.allocation_length;
  handle.buffer_id = info.buffer_id;
  const std::string bus = bus_id_of(api, info.device);
  std::memcpy(handle.bus_id, bus.data(), std::min(bus.size(), sizeof handle.bus_id - 1));
  const ErrorContext where{.op = op, .sizes = sizes_of(handle)};
  ContextScope scope(api, primary_context(api, info.device));
  *fd = -1;
  if (info.legacy_ipc) {
    handle.kind = SharedMemoryHandle::kLegacy;
    check(api, api.cuIpcGetMemHandle(&handle.legacy, info.allocation_base), "cuIpcGetMemHandle", where);
    return handle;
  }
  if ((info.handle_types & static_cast<std::uint64_t>(kHandlePosixFd)) == 0) {
    throw Error(ErrorCode::NotSupported,
                "this CUDA allocation cannot be shared with another process: it was made by cuMemCreate without "
                "the POSIX file descriptor handle type",
                {.op = op,
                 .sizes = where.sizes,
                 .hint = "allocate with requestedHandleTypes including CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, or "
                         "with cudaMalloc"});
  }
  handle.kind = SharedMemoryHandle::kPosixFd;
  CUmemGenericAllocationHandle generic = 0;
  void* base = reinterpret_cast<void*>(static_cast<std::uintptr_t>(info.allocation_base));
  check(api, api.cuMemRetainAllocationHandle(&generic, base), "cuMemRetainAllocationHandle", where);
  int exported = -1;
  const CUresult result = api.cuMemExportToShareableHandle(&exported, generic, kHandlePosixFd, 0);
  api.cuMemRelease(generic);  // the retain above; the allocation lives on
  check(api, result, "cuMemExportToShareableHandle", where);
  *fd = exported;
  return handle;
}

ImportedMemory::ImportedMemory(const SharedMemoryHandle& handle, int fd, const char* op)
    : kind_(handle.kind), size_(handle.size) {
  struct CloseFd {
    int fd;
    ~CloseFd() {
      if (fd >= 0) ::close(fd);
    }
  } close_fd{fd};
  const DriverApi& api = require_driver(op);
  const ErrorContext where{.op = op, .sizes = sizes_of(handle)};
  const std::string bus(handle.bus_id, strnlen(handle.bus_id, sizeof handle.bus_id));
  device_ = device_by_bus_id(api, bus);
  if (device_ < 0) {
    throw Error(ErrorCode::NotSupported, "the peer's GPU " + bus + " is not visible to this process",
                {.op = op, .sizes = where.sizes, .hint = "give both processes the same GPUs (CUDA_VISIBLE_DEVICES)"});
  }
  ContextScope scope(api, primary_context(api, device_));
  if (kind_ == SharedMemoryHandle::kLegacy) {
    check(api, api.cuIpcOpenMemHandle_v2(&base_, handle.legacy, kIpcLazyEnablePeerAccess), "cuIpcOpenMemHandle", where);
    return;
  }
  if (kind_ != SharedMemoryHandle::kPosixFd || fd < 0) {
    throw Error(ErrorCode::Protocol, "malformed CUDA memory handle from a peer",
                {.op = op, .sizes = "kind=" + std::to_string(kind_) + " fd=" + std::to_string(fd)});
  }
  CUmemGenericAllocationHandle generic = 0;
  check(api,
        api.cuMemImportFromShareableHandle(&generic, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)),
                                           kHandlePosixFd),
        "cuMemImportFromShareableHandle", where);
  CUresult result = api.cuMemAddressReserve(&reserved_, size_, 0, 0, 0);
  if (result == kSuccess) {
    base_ = reserved_;
    result = api.cuMemMap(base_, size_, 0, generic, 0);
    if (result == kSuccess) {
      const CUmemAccessDesc access{{kLocationDevice, device_}, kAccessReadWrite};
      result = api.cuMemSetAccess(base_, size_, &access, 1);
      if (result != kSuccess) api.cuMemUnmap(base_, size_);
    }
    if (result != kSuccess) api.cuMemAddressFree(reserved_, size_);
  }
  api.cuMemRelease(generic);  // the mapping keeps the memory
  if (result != kSuccess) base_ = reserved_ = 0;
  check(api, result, "mapping an imported CUDA allocation (cuMemAddressReserve, cuMemMap, cuMemSetAccess)", where);
}

ImportedMemory::~ImportedMemory() {
  const DriverApi* api = load_driver().api;
  if (api == nullptr || base_ == 0) return;
  ContextScope scope(*api, primary_context(*api, device_));
  if (kind_ == SharedMemoryHandle::kLegacy) {
    if (const CUresult r = api->cuIpcCloseMemHandle(base_); r != kSuccess)
      RDMX_WARN("cuIpcCloseMemHandle failed: %s", describe(*api, r).c_str());
    return;
  }
  api->cuMemUnmap(base_, size_);
  api->cuMemAddressFree(reserved_, size_);
}

std::shared_ptr<ImportedMemory> import_shared(int peer_pid, const SharedMemoryHandle& handle, int fd, const char* op) {
  struct Key {
    int pid;
    std::uint64_t buffer_id;
    std::uint64_t size;
    auto operator<=>(const Key&) const = default;
  };
  static Mutex mutex;
  static std::map<Key, std::weak_ptr<ImportedMemory>> imports RDMX_GUARDED_BY(mutex);
  const Key key{peer_pid, handle.buffer_id, handle.size};
  LockGuard lock(mutex);
  std::erase_if(imports, [](const auto& entry) { return entry.second.expired(); });
  if (auto it = imports.find(key); it != imports.end()) {
    if (auto alive = it->second.lock()) {
      if (fd >= 0) ::close(fd);
      return alive;
    }
  }
  auto imported = std::make_shared<ImportedMemory>(handle, fd, op);
  imports[key] = imported;
  return imported;
}

}  // namespace rdmx::core::cuda
