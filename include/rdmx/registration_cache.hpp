// SPDX-License-Identifier: MIT
// rdmx/registration_cache.hpp: registrations of buffers the caller does not
// own, kept between uses so that registering the same buffer again is free
// (UCX's rcache, NCCL's user-buffer registration).
//
// ProtectionDomain::register_memory is ibv_reg_mr: every call is a new
// registration with its own keys, which die with it, as on InfiniBand. This
// cache sits above it. A kept registration is good only while the memory
// behind it stays the same: where registration pins pages
// (DeviceCaps::registration_pins_memory) it would keep the old pages, and
// elsewhere it refuses every access once its memory went. So the cache
// watches every buffer for munmap, mremap and madvise(DONTNEED) through the
// kernel (userfaultfd events, no symbol patching) and drops a registration
// whose memory changed before it would hand it out again. Memory that
// cannot be watched (file mappings, a process where userfaultfd is refused)
// is registered anew after every forget_unwatched() where registration
// pins pages; rdmx info says which.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rdmx/verbs.hpp"

#include "rdmx/export.hpp"

RDMX_API_BEGIN

namespace rdmx {

// Not thread-safe: one user at a time (a communicator keeps one of its own).
class RegistrationCache {
 public:
  // `caps` are the PD's device's (DeviceCaps::registration_pins_memory
  // decides whether forget_unwatched() drops unwatched registrations). Keeps
  // at most `capacity` registrations.
  RegistrationCache(ProtectionDomain& pd, const DeviceCaps& caps, std::size_t capacity = 16);
  ~RegistrationCache();
  RegistrationCache(const RegistrationCache&) = delete;
  RegistrationCache& operator=(const RegistrationCache&) = delete;

  // A registration covering [addr, addr + length) with at least `access`:
  // a kept one when one is still valid, else a new one (dropping the least
  // recently used past capacity). The reference is valid until the next
  // get() or forget_unwatched(); the caller must not use it (nor let a peer
  // use its rkey) after memory behind it is freed. Throws what
  // register_memory throws.
  MemoryRegion& get(void* addr, std::size_t length, Access access);

  // Drops registrations that could have gone stale without notice: those
  // that pin memory the cache could not watch. Call it wherever the caller
  // may have freed memory since the last get(), e.g. as each collective starts.
  void forget_unwatched();

  struct Stats {
    std::uint64_t hits = 0;       // get() answered by a kept registration
    std::uint64_t misses = 0;     // get() that registered
    std::uint64_t unmapped = 0;   // dropped because the memory was unmapped or remapped
    std::uint64_t unwatched = 0;  // dropped by forget_unwatched()
    std::uint64_t evicted = 0;    // dropped past capacity
  };
  Stats stats() const noexcept { return stats_; }

 private:
  struct Entry;
  void drop_stale();  // registrations whose memory was unmapped

  ProtectionDomain& pd_;
  bool pins_;
  std::size_t capacity_;
  std::vector<std::unique_ptr<Entry>> entries_;  // most recently used first
  Stats stats_;
};

// Whether this process can watch memory for unmapping (and so keep
// page-pinning registrations between operations): `how` names the
// mechanism, or says why not, with a hint.
struct UnmapDetection {
  bool available = false;
  std::string how;
};
UnmapDetection unmap_detection();

}  // namespace rdmx
RDMX_API_END
