// SPDX-License-Identifier: MIT
#include "core/shared_region.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "core/asymmetric_fence.hpp"
#include "core/config.hpp"
#include "core/log.hpp"
#include "core/wait.hpp"

namespace rdmx::core {

namespace {
constexpr std::size_t kStatePage = 4096;
}  // namespace

std::unique_ptr<SharedRegion> share_device_memory(const cuda::PointerInfo& info, const void* addr,
                                                  SharedRegionState** state) {
  *state = nullptr;
  if (info.legacy_ipc) {
    RDMX_TRACE("device region at %p stays unshared: cudaMalloc memory (legacy IPC) is staged", addr);
    return nullptr;
  }
  auto shared = std::make_unique<SharedRegion>();
  shared->device = true;
  shared->cuda_offset = reinterpret_cast<std::uint64_t>(addr) - info.allocation_base;
  try {
    shared->cuda = cuda::export_memory(info, &shared->cuda_fd, "register_memory");
  } catch (const Error& e) {
    RDMX_INFO("device region at %p stays unshared (peers stage it): %s", addr, e.what());
    return nullptr;
  }
  if (shared->cuda.kind != cuda::SharedMemoryHandle::kPosixFd) {
    if (shared->cuda_fd >= 0) ::close(shared->cuda_fd);
    return nullptr;
  }
  shared->memfd = ::memfd_create("rdmx-device-region", MFD_CLOEXEC);
  void* page = MAP_FAILED;
  if (shared->memfd >= 0 && ::ftruncate(shared->memfd, kStatePage) == 0) {
    page = ::mmap(nullptr, kStatePage, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, shared->memfd, 0);
  }
  if (page == MAP_FAILED) {
    RDMX_INFO("device region at %p stays unshared: no state page (%s)", addr, std::strerror(errno));
    if (shared->memfd >= 0) ::close(shared->memfd);
    ::close(shared->cuda_fd);
    return nullptr;
  }
  shared->map_length = kStatePage;
  shared->state_offset = 0;
  *state = new (page) SharedRegionState{};
  (*state)->live.store(1, std::memory_order_release);
  return shared;
}

void retire_shared(const SharedRegion& shared, SharedRegionState* state) noexcept {
  state->live.store(0, std::memory_order_relaxed);
  heavy_fence(asymmetric_fence_available());
  // Peers copying directly finish before the region is gone (bounded: a
  // peer killed inside a copy leaves its slot set).
  const std::uint32_t used = std::min(shared.slots_given.load(), kDirectSlots);
  auto idle = [&] {
    for (std::uint32_t i = 0; i < used; ++i) {
      if (state->slots[i].busy.load(std::memory_order_acquire) != 0) return false;
    }
    return true;
  };
  if (wait_until(idle, nullptr, deadline_after(timeout())) != WaitResult::Ready) {
    RDMX_WARN(
        "deregistering a shared region: a peer's direct copy did not finish within RDMX_TIMEOUT "
        "(was the peer killed in the middle of one?)");
  }
}

void release_device_share(SharedRegion& shared, SharedRegionState* state) noexcept {
  ::munmap(state, shared.map_length);
  ::close(shared.memfd);
  if (shared.cuda_fd >= 0) ::close(shared.cuda_fd);
  shared.memfd = shared.cuda_fd = -1;
}

}  // namespace rdmx::core
