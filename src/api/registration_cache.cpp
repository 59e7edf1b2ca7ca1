// SPDX-License-Identifier: MIT
#include "rdmx/registration_cache.hpp"

#include <algorithm>
#include <utility>

#include "services/log.hpp"
#include "services/unmap_watch.hpp"

namespace rdmx {

struct RegistrationCache::Entry {
  std::unique_ptr<MemoryRegion> mr;
  std::unique_ptr<core::UnmapWatch> watch;  // null where the memory cannot be watched

  bool covers(std::uintptr_t a, std::size_t bytes, Access need) const {
    const auto base = reinterpret_cast<std::uintptr_t>(mr->addr());
    const auto have = static_cast<std::uint32_t>(mr->access());
    const auto want = static_cast<std::uint32_t>(need);
    return a >= base && a + bytes <= base + mr->length() && (have & want) == want;
  }
};

RegistrationCache::RegistrationCache(ProtectionDomain& pd, const DeviceCaps& caps, std::size_t capacity)
    : pd_(pd), pins_(caps.registration_pins_memory), capacity_(std::max<std::size_t>(capacity, 1)) {}

RegistrationCache::~RegistrationCache() = default;

void RegistrationCache::drop_stale() {
  core::read_unmap_events();
  const auto stale =
      std::remove_if(entries_.begin(), entries_.end(), [](const auto& e) { return e->watch && e->watch->unmapped(); });
  stats_.unmapped += static_cast<std::uint64_t>(entries_.end() - stale);
  entries_.erase(stale, entries_.end());
}

MemoryRegion& RegistrationCache::get(void* addr, std::size_t length, Access access) {
  drop_stale();
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (!(*it)->covers(a, length, access)) continue;
    std::rotate(entries_.begin(), it, it + 1);
    ++stats_.hits;
    return *entries_.front()->mr;
  }
  auto entry = std::make_unique<Entry>();
  // Watch before registering: a change after this point cannot be missed.
  // A pinning device's registration would keep the old pages; a software
  // provider's refuses every access once its memory changed
  // (driver/memory_registry.hpp): either way it must not be handed out again.
  core::WatchResult w = core::watch_unmapping(addr, length);
  entry->watch = std::move(w.watch);
  if (!entry->watch && pins_) {
    RDMX_TRACE("registration cache: %p +%zu cannot be watched for unmapping (%s): kept until forget_unwatched()", addr,
               length, w.why_not.c_str());
  }
  entry->mr = pd_.register_memory(addr, length, access);
  ++stats_.misses;
  if (entries_.size() >= capacity_) {
    entries_.pop_back();
    ++stats_.evicted;
  }
  entries_.insert(entries_.begin(), std::move(entry));
  return *entries_.front()->mr;
}

void RegistrationCache::forget_unwatched() {
  if (!pins_) return;
  drop_stale();
  const auto gone = std::remove_if(entries_.begin(), entries_.end(), [](const auto& e) { return !e->watch; });
  stats_.unwatched += static_cast<std::uint64_t>(entries_.end() - gone);
  entries_.erase(gone, entries_.end());
}

UnmapDetection unmap_detection() {
  const core::UnmapWatchSupport s = core::unmap_watch_support();
  return {s.available, s.how};
}

}  // namespace rdmx
