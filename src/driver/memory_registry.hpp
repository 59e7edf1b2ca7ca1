// SPDX-License-Identifier: MIT
// The table of registered memory regions of one device. It decides every
// access, local and remote: a key must exist, belong to the QP's protection
// domain, cover the whole range, and grant the right. Accesses run under a
// shared lock, so deregistration waits for copies in flight and a key is dead
// the moment deregistration returns.
#pragma once

#include <array>
#include <atomic>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "driver/device_lock.hpp"
#include "driver/lifetime.hpp"
#include "driver/region_binder.hpp"
#include "rdmx/verbs.hpp"
#include "services/cuda/ipc.hpp"
#include "services/mutex.hpp"
#include "services/unmap_watch.hpp"
#include "services/wait.hpp"

namespace rdmx::core {

struct RegionOffers;   // driver/shared_region.hpp
struct HeapStatePage;  // driver/shared_region.hpp
class EngineHandoff;   // driver/device_resources.hpp

// The shared state of a region allocated by allocate_memory(), in the page
// after its data, so peers that map the region can tell whether it is still
// registered. Each peer QP that copies directly owns one busy slot (its own
// cache line): it sets it, then reads `live` (core::light_fence between);
// deregistration clears `live`, runs core::heavy_fence, then waits until
// every slot is clear, so no direct copy outlives it. For device memory
// shared through a legacy IPC handle, a peer QP also sets `holding` while
// its process has the allocation open (the same fences, against `live`);
// deregistration waits for that too (driver/shared_region.hpp).
// `doorbell` is rung by whoever places a peer's WRITE in the region, the
// peer's own process included (MemoryRegion::write_doorbell()).
constexpr std::uint32_t kDirectSlots = 62;
struct alignas(64) BusySlot {
  std::atomic<std::uint32_t> busy;
  std::atomic<std::uint32_t> holding;
};
struct SharedRegionState {
  alignas(64) std::atomic<std::uint32_t> live;
  alignas(64) WakeWords doorbell;
  BusySlot slots[kDirectSlots];
};
static_assert(sizeof(SharedRegionState) <= 4096);

// Where a shareable region's memory comes from, for providers that map it in peers.
struct SharedRegion {
  int memfd = -1;
  std::size_t map_length = 0;    // bytes to map from offset 0
  std::size_t state_offset = 0;  // where the SharedRegionState lies in the mapping
  bool on_first_touch = false;   // Residency::OnFirstTouch: peers map it without populating it
  // Slots handed out so far (by the target's provider, to the QPs it offers the region to).
  mutable std::atomic<std::uint32_t> slots_given{0};
  // The process each slot went to (0: not known): a slot a dead process
  // left busy is not waited for.
  mutable std::array<std::atomic<int>, kDirectSlots> slot_pids{};
  // Device memory (driver/shared_region.hpp): the memfd then holds the
  // state page only, and peers open the allocation through `cuda` (with
  // `cuda_fd`, a descriptor the region owns and offers copies of); the
  // region starts `cuda_offset` bytes into the allocation.
  bool device = false;
  cuda::SharedMemoryHandle cuda{};
  int cuda_fd = -1;
  std::uint64_t cuda_offset = 0;
  // Legacy-handle device memory: the connections it was offered over, whose
  // peers must close their imports before deregistration returns.
  std::shared_ptr<RegionOffers> offers;
  // Host memory given to register_memory(): peers on this host copy into
  // and out of it across processes (process_vm_writev/readv), so the memfd
  // holds the state page only. That page is made when the region is first
  // offered (core::heap_state_page): most regions never are, and a page
  // holds a descriptor for as long as its region lives.
  bool heap = false;
  std::shared_ptr<HeapStatePage> heap_page;
  // The watch of a heap region's pages (null where they cannot be watched):
  // it clears the state page's `live` once they are unmapped, so that peers
  // stop copying into the address range on their own.
  UnmapWatch* heap_watch = nullptr;
};

// Where a region's memory lives: the GPU of device memory, which the
// engines reach through the driver (core/cuda), never with the CPU.
struct RegionMemory {
  MemoryType type = MemoryType::Host;
  int device = -1;
  // The write doorbell of a region from allocate_memory(), rung after a
  // peer's WRITE into it has landed; null for other regions.
  WakeWords* doorbell = nullptr;
};

// Whether the watched memory of a region was unmapped, remapped or dropped
// by a call that returned before this one started (services/unmap_watch.hpp).
inline bool memory_gone(const UnmapWatch& watch) { return watch.unmapped_now(); }

enum class AccessCheck : std::uint8_t { Ok, NoSuchKey, WrongDomain, OutOfBounds, MissingRight, Unmapped };
const char* to_string(AccessCheck check) noexcept;

class MemoryRegistry {
 public:
  struct Keys {
    std::uint32_t lkey;
    std::uint32_t rkey;
  };
  // `domain` identifies the protection domain (any stable pointer). `given`:
  // keys chosen by hardware (see RegionBinder); otherwise fresh random ones.
  // `watch`, when given, watches the region's pages: once any was unmapped,
  // remapped or dropped, every access to the region is refused (Unmapped).
  Keys add(const void* domain, void* addr, std::size_t length, Access access, const SharedRegion* shared = nullptr,
           const Keys* given = nullptr, RegionMemory memory = {}, std::unique_ptr<UnmapWatch> watch = nullptr);

  // Installed once, before any protection domain exists, by a provider whose
  // hardware must see every region (driver/region_binder.hpp).
  void set_binder(std::shared_ptr<RegionBinder> binder) { binder_ = std::move(binder); }
  RegionBinder* binder() const { return binder_.get(); }
  // Removes a region, then waits out the accesses that checked it through a
  // cache before (every provider's access lock, taken in turn).
  void remove(std::uint32_t lkey);
  // Removes a region only its owner ever uses, from under the owner's lock
  // (where remove() would wait for that very lock): a QP's staging buffers,
  // which no peer reaches (no rkey) and which the QP touches only under its
  // lock, so no access can be in flight. False when no region has `lkey`.
  bool remove_unshared(std::uint32_t lkey);

  // Runs fn(char* ptr) with ptr = addr if `key` (an rkey when remote, else an
  // lkey) covers [addr, addr+length) in `domain` with `need`; returns the
  // verdict. Zero-length accesses need no key, as in IB.
  template <class Fn>
  AccessCheck with_access(bool remote, const void* domain, std::uint32_t key, std::uint64_t addr, std::uint64_t length,
                          Access need, Fn&& fn) const {
    SharedLockGuard lock(mutex_);
    AccessCheck verdict = length == 0 ? AccessCheck::Ok : check_locked(remote, domain, key, addr, length, need);
    if (verdict == AccessCheck::Ok) fn(reinterpret_cast<char*>(addr));
    return verdict;
  }
  AccessCheck check(bool remote, const void* domain, std::uint32_t key, std::uint64_t addr, std::uint64_t length,
                    Access need) const {
    return with_access(remote, domain, key, addr, length, need, [](char*) {});
  }
  // with_access, also telling fn(char* ptr, const RegionMemory&) where the
  // region's memory lives (host memory for a zero-length access).
  template <class Fn>
  AccessCheck with_access_in(bool remote, const void* domain, std::uint32_t key, std::uint64_t addr,
                             std::uint64_t length, Access need, Fn&& fn) const {
    SharedLockGuard lock(mutex_);
    RegionMemory memory;
    AccessCheck verdict =
        length == 0 ? AccessCheck::Ok : check_locked(remote, domain, key, addr, length, need, &memory);
    if (verdict == AccessCheck::Ok) fn(reinterpret_cast<char*>(addr), memory);
    return verdict;
  }
  // Whether any region of device memory is registered now: where none is,
  // the engines skip asking each buffer where it lives.
  bool holds_device_memory() const noexcept { return device_regions_.load(std::memory_order_acquire) != 0; }

  // Bumped by every deregistration: a check cached while it had the same
  // value is still valid (the region it found is still registered).
  std::uint64_t generation() const noexcept { return generation_.load(std::memory_order_acquire); }

  // A lock under which a provider touches memory it checked through a
  // cached verdict (see generation()). remove() takes and releases every
  // such lock after bumping the generation, so once it returns no access
  // that relied on the old verdict is still running.
  void add_access_lock(DeviceLock* lock);
  void remove_access_lock(DeviceLock* lock);

  struct Verdict {
    std::uint64_t base = 0;
    std::uint64_t length = 0;
    Access access = Access::None;
    const void* domain = nullptr;
    const SharedRegion* shared = nullptr;  // set for regions peers on this host may reach directly
    RegionMemory memory;
    const UnmapWatch* watch = nullptr;  // valid while the generation is unchanged
  };
  // The region behind a key, for caching (nullopt when there is none).
  bool lookup(bool remote, std::uint32_t key, Verdict* out) const;

  // A read lock on the table, held while the object lives (or until
  // unlock()): accesses that span several keys (scatter-gather lists) check
  // each piece through it, then touch the memory; deregistration waits.
  class RDMX_SCOPED_CAPABILITY Reader {
   public:
    explicit Reader(const MemoryRegistry& registry) RDMX_ACQUIRE_SHARED(registry.mutex_) : registry_(registry) {
      registry_.mutex_.lock_shared();
    }
    ~Reader() RDMX_RELEASE() {
      if (held_) registry_.mutex_.unlock_shared();
    }
    void unlock() RDMX_RELEASE() {
      held_ = false;
      registry_.mutex_.unlock_shared();
    }
    // `memory`, when given, receives the region's memory on success.
    AccessCheck check(bool remote, const void* domain, std::uint32_t key, std::uint64_t addr, std::uint64_t length,
                      Access need, RegionMemory* memory = nullptr) const {
      assert(held_);
      registry_.mutex_.assert_held_shared();
      return registry_.check_locked(remote, domain, key, addr, length, need, memory);
    }
    Reader(const Reader&) = delete;
    Reader& operator=(const Reader&) = delete;

   private:
    const MemoryRegistry& registry_;
    bool held_ = true;
  };

 private:
  struct Entry {
    const void* domain;
    std::uint64_t base;
    std::uint64_t length;
    Access access;
    std::uint32_t lkey;
    std::uint32_t rkey;
    const SharedRegion* shared;
    RegionMemory memory;
    std::unique_ptr<UnmapWatch> watch;  // software providers' host memory, where it can be watched
  };
  std::uint32_t fresh_key_locked() RDMX_REQUIRES(mutex_);
  // Takes the region out of the tables; its watch, if any, is handed back
  // for the caller to drop once no cached check can still use it.
  bool erase(std::uint32_t lkey, std::unique_ptr<UnmapWatch>* watch);
  // `memory`, when given, receives the region's memory on success.
  AccessCheck check_locked(bool remote, const void* domain, std::uint32_t key, std::uint64_t addr, std::uint64_t length,
                           Access need, RegionMemory* memory = nullptr) const RDMX_REQUIRES_SHARED(mutex_);

  mutable SharedMutex mutex_;
  std::unordered_map<std::uint32_t, Entry> by_lkey_ RDMX_GUARDED_BY(mutex_);
  // rkey -> entry in by_lkey_ (unordered_map nodes never move), so a remote
  // check is one lookup.
  std::unordered_map<std::uint32_t, const Entry*> by_rkey_ RDMX_GUARDED_BY(mutex_);
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<std::uint32_t> device_regions_{0};
  Mutex access_locks_mutex_;
  std::vector<DeviceLock*> access_locks_ RDMX_GUARDED_BY(access_locks_mutex_);
  std::shared_ptr<RegionBinder> binder_;
};

// A one-entry cache of a key's region, valid while the registry's generation
// is unchanged: its verdict is the registry's at the time of the check. A
// provider that touches memory relying on it must do so under a lock given
// to add_access_lock(), so that deregistration waits for it.
class CachedKey {
 public:
  // Same verdict as MemoryRegistry::check(), without the registry's lock when the cache hits.
  AccessCheck check(const MemoryRegistry& registry, bool remote, const void* domain, std::uint32_t key,
                    std::uint64_t addr, std::uint64_t length, Access need) {
    if (length == 0) return AccessCheck::Ok;
    const std::uint64_t generation = registry.generation();
    if (!valid_ || generation_ != generation || key_ != key) {
      valid_ = registry.lookup(remote, key, &verdict_);
      key_ = key;
      generation_ = generation;
      if (!valid_) return AccessCheck::NoSuchKey;
    }
    if (verdict_.domain != domain) return AccessCheck::WrongDomain;
    if (addr < verdict_.base || length > verdict_.length || addr - verdict_.base > verdict_.length - length) {
      return AccessCheck::OutOfBounds;
    }
    if (need != Access::None && !has(verdict_.access, need)) return AccessCheck::MissingRight;
    if (verdict_.watch != nullptr && memory_gone(*verdict_.watch)) return AccessCheck::Unmapped;
    return AccessCheck::Ok;
  }
  // The region behind the last key that passed check().
  const MemoryRegistry::Verdict& verdict() const { return verdict_; }

 private:
  bool valid_ = false;
  std::uint32_t key_ = 0;
  std::uint64_t generation_ = 0;
  MemoryRegistry::Verdict verdict_;
};

// A protection domain over a registry; shared by providers whose regions are
// ordinary process memory. It is the PD's state: the user's ProtectionDomain
// (DomainHandle), its regions and its QPs hold it (driver/lifetime.hpp), and
// its address is the domain the registry checks keys against, which no
// other PD takes while anything of this one lives.
class RegistryProtectionDomain final : public std::enable_shared_from_this<RegistryProtectionDomain> {
 public:
  // `provider` names the device in errors; `cuda` is its caps().cuda_memory.
  // `share_device_memory`: device regions are made shareable with peers on
  // this host (a provider that maps them: shm, or auto over it).
  // `doorbell_handoff`: given where the device's caps().writes_wake_waiters;
  // allocated regions then offer a write doorbell, and a thread about to
  // sleep on one hands progress to the device's engine (which may be the
  // one to place the WRITE it waits for).
  // `device`: the hold on the device that allocated it.
  RegistryProtectionDomain(ParentHold device, MemoryRegistry& registry, std::string provider, CudaMemorySupport cuda,
                           bool share_device_memory = false, EngineHandoff* doorbell_handoff = nullptr)
      : device_(std::move(device)),
        registry_(registry),
        bound_(registry.binder() ? registry.binder()->open_domain() : nullptr),
        provider_(std::move(provider)),
        cuda_(cuda),
        share_device_memory_(share_device_memory),
        doorbell_handoff_(doorbell_handoff) {}
  std::unique_ptr<MemoryRegion> register_memory(void* addr, std::size_t length, Access access);
  std::unique_ptr<MemoryRegion> allocate_memory(std::size_t length, Access access, Residency residency);
  MemoryRegistry& registry() const { return registry_; }
  // Its regions and QPs.
  Children& children() noexcept { return children_; }
  // The hardware's side of this PD when the registry has a binder, else null.
  RegionBinder::Domain* bound() const { return bound_.get(); }

 private:
  // Registers with the registry (and the binder's hardware first, when there is one).
  MemoryRegistry::Keys add_region(void* addr, std::size_t length, Access access, const SharedRegion* shared,
                                  std::unique_ptr<RegionBinder::Binding>* binding, RegionMemory memory,
                                  std::unique_ptr<UnmapWatch> watch = nullptr);

  // A hold on the region's PD, for the region to keep.
  ParentHold region_hold() { return ParentHold(shared_from_this(), children_, ChildKind::MemoryRegion); }

  ParentHold device_;  // first: the device outlives everything below
  MemoryRegistry& registry_;
  std::unique_ptr<RegionBinder::Domain> bound_;
  std::string provider_;
  CudaMemorySupport cuda_;
  bool share_device_memory_;
  EngineHandoff* doorbell_handoff_;
  Children children_;
};

// What alloc_pd() returns: the user's handle on a domain its regions and QPs hold too.
class DomainHandle final : public ProtectionDomain {
 public:
  explicit DomainHandle(std::shared_ptr<RegistryProtectionDomain> domain) : domain_(std::move(domain)) {}
  ~DomainHandle() override { warn_destroyed_with_children("protection domain", domain_->children()); }
  DomainHandle(const DomainHandle&) = delete;
  DomainHandle& operator=(const DomainHandle&) = delete;

  LiveChildren live_children() const override { return domain_->children().live(); }
  std::unique_ptr<MemoryRegion> register_memory(void* addr, std::size_t length, Access access) override {
    return domain_->register_memory(addr, length, access);
  }
  std::unique_ptr<MemoryRegion> allocate_memory(std::size_t length, Access access,
                                                Residency residency = Residency::Now) override {
    return domain_->allocate_memory(length, access, residency);
  }
  const std::shared_ptr<RegistryProtectionDomain>& domain() const noexcept { return domain_; }

 private:
  std::shared_ptr<RegistryProtectionDomain> domain_;
};

}  // namespace rdmx::core
