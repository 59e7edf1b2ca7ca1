// SPDX-License-Identifier: MIT
#include "driver/shared_region.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "services/asymmetric_fence.hpp"
#include "services/config.hpp"
#include "services/log.hpp"
#include "services/process.hpp"
#include "services/wait.hpp"

namespace rdmx::core {

namespace {
constexpr std::size_t kStatePage = 4096;
}  // namespace

std::unique_ptr<SharedRegion> share_device_memory(const cuda::PointerInfo& info, const void* addr,
                                                  SharedRegionState** state) {
  *state = nullptr;
  auto shared = std::make_unique<SharedRegion>();
  shared->device = true;
  shared->cuda_offset = reinterpret_cast<std::uint64_t>(addr) - info.allocation_base;
  try {
    shared->cuda = cuda::export_memory(info, &shared->cuda_fd, "register_memory");
  } catch (const Error& e) {
    RDMX_INFO("device region at %p stays unshared (peers stage it): %s", addr, e.what());
    return nullptr;
  }
  if (shared->cuda.kind == cuda::SharedMemoryHandle::kLegacy) shared->offers = std::make_shared<RegionOffers>();
  shared->memfd = ::memfd_create("rdmx-device-region", MFD_CLOEXEC);
  void* page = MAP_FAILED;
  if (shared->memfd >= 0 && ::ftruncate(shared->memfd, kStatePage) == 0) {
    page = ::mmap(nullptr, kStatePage, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, shared->memfd, 0);
  }
  if (page == MAP_FAILED) {
    RDMX_INFO("device region at %p stays unshared: no state page (%s)", addr, std::strerror(errno));
    if (shared->memfd >= 0) ::close(shared->memfd);
    if (shared->cuda_fd >= 0) ::close(shared->cuda_fd);
    return nullptr;
  }
  shared->map_length = kStatePage;
  shared->state_offset = 0;
  *state = new (page) SharedRegionState{};
  (*state)->live.store(1, std::memory_order_release);
  return shared;
}

std::unique_ptr<SharedRegion> share_heap_memory() {
  auto shared = std::make_unique<SharedRegion>();
  shared->heap = true;
  shared->heap_page = std::make_shared<HeapStatePage>();
  return shared;
}

StatePage heap_state_page(const SharedRegion& shared) {
  HeapStatePage& lazy = *shared.heap_page;
  LockGuard lock(lazy.mutex);
  if (lazy.tried) return lazy.page;
  lazy.tried = true;
  const int memfd = ::memfd_create("rdmx-heap-region", MFD_CLOEXEC);
  void* page = MAP_FAILED;
  if (memfd >= 0 && ::ftruncate(memfd, kStatePage) == 0) {
    page = ::mmap(nullptr, kStatePage, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, memfd, 0);
  }
  if (page == MAP_FAILED) {
    RDMX_INFO("a registered host region stays unshared (peers reach it through the ring): no state page (%s)",
              std::strerror(errno));
    if (memfd >= 0) ::close(memfd);
    return lazy.page;
  }
  lazy.page.memfd = memfd;
  lazy.page.state = new (page) SharedRegionState{};
  lazy.page.state->live.store(1, std::memory_order_release);
  if (shared.heap_watch != nullptr) shared.heap_watch->clear_on_unmap(&lazy.page.state->live);
  return lazy.page;
}

void retire_heap_share(const SharedRegion& shared) noexcept {
  HeapStatePage& lazy = *shared.heap_page;
  LockGuard lock(lazy.mutex);
  if (lazy.page.state == nullptr) return;
  retire_shared(shared, lazy.page.state);
  ::munmap(lazy.page.state, kStatePage);
  ::close(lazy.page.memfd);
  lazy.page = {};
}

namespace {

// Asks every peer the region was offered to to close its import, then waits
// until each has (its slot's `holding` word is clear) or its process exited.
void wait_for_imports_closed(RegionOffers& region_offers, SharedRegionState* state) noexcept {
  std::vector<RegionOffers::Offer> offers;
  {
    LockGuard lock(region_offers.mutex);
    offers = region_offers.offers;
  }
  if (offers.empty()) return;
  std::vector<bool> asked(offers.size(), false);
  auto closed = [&] {
    bool all = true;
    for (std::size_t i = 0; i < offers.size(); ++i) {
      const RegionOffers::Offer& o = offers[i];
      if (state->slots[o.slot].holding.load(std::memory_order_acquire) == 0 || o.link->peer_exited()) continue;
      if (!asked[i]) asked[i] = o.link->ask_to_close(o.rkey);
      all = false;
    }
    return all;
  };
  if (wait_until(closed, nullptr, deadline_after(timeout())) == WaitResult::Ready) return;
  std::string who;
  for (std::size_t i = 0; i < offers.size(); ++i) {
    if (state->slots[offers[i].slot].holding.load(std::memory_order_acquire) == 0) continue;
    who += (who.empty() ? "" : ", ") + offers[i].link->describe();
  }
  RDMX_WARN(
      "deregistering cudaMalloc memory (rkey 0x%x) shared through a legacy IPC handle: %s did not close its import "
      "within RDMX_TIMEOUT (%lld ms); freeing the memory while it is open is undefined behaviour in CUDA (is that "
      "process stopped or hung?)",
      offers.front().rkey, who.c_str(), static_cast<long long>(timeout().count()));
}

}  // namespace

void retire_shared(const SharedRegion& shared, SharedRegionState* state) noexcept {
  state->live.store(0, std::memory_order_relaxed);
  heavy_fence(asymmetric_fence_available());
  // Peers copying directly finish before the region is gone. A peer killed
  // inside a copy leaves its slot set: its process being gone ends the
  // wait. One stopped there is waited for (bounded): it may copy on resuming.
  const std::uint32_t used = std::min(shared.slots_given.load(), kDirectSlots);
  auto idle = [&] {
    for (std::uint32_t i = 0; i < used; ++i) {
      if (state->slots[i].busy.load(std::memory_order_acquire) == 0) continue;
      const int pid = shared.slot_pids[i].load(std::memory_order_relaxed);
      if (pid <= 0 || !process_gone(pid)) return false;
    }
    return true;
  };
  if (wait_until(idle, nullptr, deadline_after(timeout())) != WaitResult::Ready) {
    std::string who;
    for (std::uint32_t i = 0; i < used; ++i) {
      if (state->slots[i].busy.load(std::memory_order_acquire) == 0) continue;
      who += (who.empty() ? "process " : ", ") + std::to_string(shared.slot_pids[i].load(std::memory_order_relaxed));
    }
    RDMX_WARN(
        "deregistering a shared %s region: the direct copy of peer %s did not finish within RDMX_TIMEOUT (%lld ms); "
        "if that process is stopped and resumes, its copy lands in memory this process may reuse (is it stopped or "
        "hung? end it before reusing the buffer)",
        shared.device ? "device" : "host", who.c_str(), static_cast<long long>(timeout().count()));
  }
  if (shared.offers) wait_for_imports_closed(*shared.offers, state);
}

void retire_allocated(SharedRegionState* state) noexcept {
  // A copy that starts once this returns sees the region gone (and takes
  // the ring, where the table refuses it), as with retire_shared().
  state->live.store(0, std::memory_order_relaxed);
  heavy_fence(asymmetric_fence_available());
}

void release_device_share(SharedRegion& shared, SharedRegionState* state) noexcept {
  ::munmap(state, shared.map_length);
  ::close(shared.memfd);
  if (shared.cuda_fd >= 0) ::close(shared.cuda_fd);
  shared.memfd = shared.cuda_fd = -1;
}

}  // namespace rdmx::core
