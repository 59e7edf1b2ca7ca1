// SPDX-License-Identifier: MIT
#include "driver/memory_registry.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <optional>

#include "driver/device_resources.hpp"
#include "driver/provider.hpp"
#include "driver/shared_region.hpp"
#include "services/cuda/pointer.hpp"
#include "services/kernel_random.hpp"

#include "services/log.hpp"
#include "services/mapped_memory.hpp"

namespace rdmx::core {

const char* to_string(AccessCheck check) noexcept {
  switch (check) {
    case AccessCheck::Ok: return "ok";
    case AccessCheck::NoSuchKey: return "no region has this key (wrong or deregistered key)";
    case AccessCheck::WrongDomain: return "the region belongs to another protection domain";
    case AccessCheck::OutOfBounds: return "the access falls outside the registered region";
    case AccessCheck::MissingRight: return "the region was not registered with the needed access right";
    case AccessCheck::Unmapped:
      return "the region's memory was unmapped, remapped or dropped (madvise) after it was registered";
  }
  return "unknown";
}

std::uint32_t MemoryRegistry::fresh_key_locked() {
  // Random keys from the kernel, so a peer cannot guess a live key from
  // the ones it was given (a seeded generator gives its seed away).
  for (;;) {
    auto key = static_cast<std::uint32_t>(kernel_random64());
    if (key != 0 && !by_lkey_.contains(key) && !by_rkey_.contains(key)) return key;
  }
}

MemoryRegistry::Keys MemoryRegistry::add(const void* domain, void* addr, std::size_t length, Access access,
                                         const SharedRegion* shared, const Keys* given, RegionMemory memory,
                                         std::unique_ptr<UnmapWatch> watch) {
  LockGuard lock(mutex_);
  Keys keys{};
  if (given != nullptr) {
    // Hardware keys are unique among the device's live regions.
    // A region without remote rights may have rkey 0 (rxe): it is not looked
    // up remotely, and several can share it.
    if (by_lkey_.contains(given->lkey) || (given->rkey != 0 && by_rkey_.contains(given->rkey))) {
      throw Error(ErrorCode::System, "the RDMA device returned a key that is already registered",
                  {.op = "register_memory",
                   .sizes = "lkey=" + std::to_string(given->lkey),
                   .hint = "a driver bug; report it with RDMX_DEBUG=TRACE output"});
    }
    keys = *given;
  } else {
    keys.lkey = fresh_key_locked();
    do {
      keys.rkey = fresh_key_locked();  // never 0
    } while (keys.rkey == keys.lkey);
  }
  auto it = by_lkey_
                .emplace(keys.lkey, Entry{domain, reinterpret_cast<std::uint64_t>(addr), length, access, keys.lkey,
                                          keys.rkey, shared, memory, std::move(watch)})
                .first;
  if (keys.rkey != 0) by_rkey_.emplace(keys.rkey, &it->second);
  if (memory.type != MemoryType::Host) device_regions_.fetch_add(1, std::memory_order_acq_rel);
  return keys;
}

void MemoryRegistry::remove(std::uint32_t lkey) {
  std::unique_ptr<UnmapWatch> watch;
  if (!erase(lkey, &watch)) return;
  // Wait out accesses that checked through a cache before the bump (their
  // verdict may still point at the watch, which goes only after them).
  LockGuard users(access_locks_mutex_);
  for (DeviceLock* m : access_locks_) LockGuard wait(*m);
}

bool MemoryRegistry::remove_unshared(std::uint32_t lkey) {
  std::unique_ptr<UnmapWatch> watch;
  return erase(lkey, &watch);
}

bool MemoryRegistry::erase(std::uint32_t lkey, std::unique_ptr<UnmapWatch>* watch) {
  LockGuard lock(mutex_);
  auto it = by_lkey_.find(lkey);
  if (it == by_lkey_.end()) return false;
  if (auto r = by_rkey_.find(it->second.rkey); r != by_rkey_.end() && r->second == &it->second) by_rkey_.erase(r);
  if (it->second.memory.type != MemoryType::Host) device_regions_.fetch_sub(1, std::memory_order_acq_rel);
  *watch = std::move(it->second.watch);
  by_lkey_.erase(it);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  return true;
}

void MemoryRegistry::add_access_lock(DeviceLock* lock) {
  LockGuard users(access_locks_mutex_);
  access_locks_.push_back(lock);
}

void MemoryRegistry::remove_access_lock(DeviceLock* lock) {
  LockGuard users(access_locks_mutex_);
  std::erase(access_locks_, lock);
}

bool MemoryRegistry::lookup(bool remote, std::uint32_t key, Verdict* out) const {
  SharedLockGuard lock(mutex_);
  const Entry* entry = nullptr;
  if (remote) {
    auto it = by_rkey_.find(key);
    if (it != by_rkey_.end()) entry = it->second;
  } else {
    auto it = by_lkey_.find(key);
    if (it != by_lkey_.end()) entry = &it->second;
  }
  if (entry == nullptr) return false;
  *out = {entry->base, entry->length, entry->access, entry->domain, entry->shared, entry->memory, entry->watch.get()};
  return true;
}

AccessCheck MemoryRegistry::check_locked(bool remote, const void* domain, std::uint32_t key, std::uint64_t addr,
                                         std::uint64_t length, Access need, RegionMemory* memory) const {
  const Entry* entry = nullptr;
  if (remote) {
    auto it = by_rkey_.find(key);
    if (it == by_rkey_.end()) return AccessCheck::NoSuchKey;
    entry = it->second;
  } else {
    auto it = by_lkey_.find(key);
    if (it == by_lkey_.end()) return AccessCheck::NoSuchKey;
    entry = &it->second;
  }
  if (entry->domain != domain) return AccessCheck::WrongDomain;
  if (addr < entry->base || length > entry->length || addr - entry->base > entry->length - length) {
    return AccessCheck::OutOfBounds;
  }
  if (need != Access::None && !has(entry->access, need)) return AccessCheck::MissingRight;
  if (entry->watch && memory_gone(*entry->watch)) return AccessCheck::Unmapped;
  if (memory != nullptr) *memory = entry->memory;
  return AccessCheck::Ok;
}

namespace {
class RegisteredRegion final : public RegionBase {
 public:
  RegisteredRegion(ParentHold pd, MemoryRegistry& registry, void* addr, std::size_t length, MemoryRegistry::Keys keys,
                   Access access, const cuda::PointerInfo& memory, std::unique_ptr<RegionBinder::Binding> binding,
                   std::unique_ptr<SharedRegion> shared, SharedRegionState* state)
      : RegionBase(addr, length, keys.lkey, keys.rkey, access, memory.type, memory.device),
        pd_(std::move(pd)),
        registry_(registry),
        binding_(std::move(binding)),
        shared_(std::move(shared)),
        state_(state) {}
  // Out of the registry first (software providers stop), then out of the
  // hardware, then out of the peers that opened it.
  ~RegisteredRegion() override {
    registry_.remove(lkey());
    binding_.reset();
    if (shared_ && shared_->heap) {
      retire_heap_share(*shared_);
    } else if (shared_) {
      retire_shared(*shared_, state_);
      release_device_share(*shared_, state_);
    }
  }

 private:
  ParentHold pd_;  // first: the PD (and its device) outlive the deregistration
  MemoryRegistry& registry_;
  std::unique_ptr<RegionBinder::Binding> binding_;
  std::unique_ptr<SharedRegion> shared_;  // device or remotely reachable host memory shared with same-host peers
  SharedRegionState* state_;
};
}  // namespace

namespace {
void check_rights(Access access, const char* sizes) {
  if ((has(access, Access::RemoteWrite) || has(access, Access::RemoteAtomic)) && !has(access, Access::LocalWrite)) {
    throw Error(ErrorCode::InvalidArgument,
                "REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE (as in InfiniBand), got " + to_string(access),
                {.op = "register_memory", .sizes = sizes, .hint = "add Access::LocalWrite"});
  }
}

// As the kernel does when ibv_reg_mr pins pages: every byte must be mapped,
// readable, and writable where the region grants any write.
void check_mapped(void* addr, std::size_t length, Access access, const char* sizes) {
  const bool need_write =
      has(access, Access::LocalWrite) || has(access, Access::RemoteWrite) || has(access, Access::RemoteAtomic);
  const std::string problem = mapping_problem(addr, length, need_write);
  if (problem.empty()) return;
  char range[96];
  std::snprintf(range, sizeof(range), "[%p, %p)", addr, static_cast<void*>(static_cast<char*>(addr) + length));
  throw Error(ErrorCode::InvalidArgument,
              std::string("cannot register ") + range + " with " + to_string(access) + ": " + problem,
              {.op = "register_memory",
               .sizes = sizes,
               .hint = "register only memory this process has mapped with the access asked (ibv_reg_mr refuses "
                       "such a range with EFAULT): check the buffer's address and length, and that it is still "
                       "allocated"});
}

// An allocated region's write doorbell: the state page's words, which
// whoever places a peer's WRITE rings (core::ring). A waiter about to sleep
// hands progress to the device's engine first: on tcp that engine is what
// places the WRITE it waits for.
class RegionDoorbell final : public Doorbell {
 public:
  RegionDoorbell(WakeWords* words, EngineHandoff* handoff) noexcept : word_(words), handoff_(handoff) {}
  std::uint32_t epoch() const noexcept override { return word_.epoch(); }
  void block(std::uint32_t seen, Clock::time_point deadline) const noexcept override {
    handoff_->application_idle();
    word_.block(seen, deadline);
  }

 private:
  WaitWord word_;
  EngineHandoff* handoff_;
};

// Memory from a memfd, registered; the state page follows the data.
class AllocatedRegion final : public RegionBase {
 public:
  AllocatedRegion(ParentHold pd, MemoryRegistry& registry, void* addr, std::size_t length, MemoryRegistry::Keys keys,
                  Access access, std::unique_ptr<SharedRegion> shared, std::unique_ptr<RegionBinder::Binding> binding,
                  EngineHandoff* doorbell_handoff)
      : RegionBase(addr, length, keys.lkey, keys.rkey, access),
        pd_(std::move(pd)),
        registry_(registry),
        shared_(std::move(shared)),
        binding_(std::move(binding)) {
    if (doorbell_handoff != nullptr) {
      doorbell_.emplace(&state()->doorbell, doorbell_handoff);
      set_write_doorbell(&*doorbell_);
    }
  }
  ~AllocatedRegion() override {
    registry_.remove(lkey());
    binding_.reset();
    retire_allocated(state());
    ::munmap(addr(), shared_->map_length);
    ::close(shared_->memfd);
  }

 private:
  SharedRegionState* state() const {
    return reinterpret_cast<SharedRegionState*>(static_cast<char*>(addr()) + shared_->state_offset);
  }

  ParentHold pd_;  // first: the PD (and its device) outlive the deregistration
  MemoryRegistry& registry_;
  std::unique_ptr<SharedRegion> shared_;
  std::unique_ptr<RegionBinder::Binding> binding_;
  std::optional<RegionDoorbell> doorbell_;
};
}  // namespace

std::unique_ptr<MemoryRegion> RegistryProtectionDomain::allocate_memory(std::size_t length, Access access,
                                                                        Residency residency) {
  char sizes[64];
  std::snprintf(sizes, sizeof(sizes), "length=%zu", length);
  check_rights(access, sizes);
  const std::size_t page = 4096;
  auto shared = std::make_unique<SharedRegion>();
  shared->state_offset = (length + page - 1) / page * page;
  shared->map_length = shared->state_offset + page;
  shared->memfd = ::memfd_create("rdmx-region", MFD_CLOEXEC);
  void* base = MAP_FAILED;
  if (shared->memfd >= 0 && ::ftruncate(shared->memfd, static_cast<off_t>(shared->map_length)) == 0) {
    // Resident from the start, as a pinned verbs registration is: a page
    // first touched inside a peer's copy would fault in the middle of a
    // transfer (docs/journal/PERFORMANCE-HISTORY.md, "First calls"). Unless
    // asked otherwise; a binder's registration pins every page anyway.
    shared->on_first_touch = residency == Residency::OnFirstTouch && bound_ == nullptr;
    const int populate = shared->on_first_touch ? 0 : MAP_POPULATE;
    base = ::mmap(nullptr, shared->map_length, PROT_READ | PROT_WRITE, MAP_SHARED | populate, shared->memfd, 0);
  }
  if (base == MAP_FAILED) {
    int saved = errno;
    if (shared->memfd >= 0) ::close(shared->memfd);
    throw Error(ErrorCode::System, std::string("cannot allocate shareable memory: ") + std::strerror(saved),
                {.op = "allocate_memory", .sizes = sizes, .hint = "check memory limits (ulimit -v, cgroup memory)"});
  }
  auto* state = new (static_cast<char*>(base) + shared->state_offset) SharedRegionState{};
  state->live.store(1, std::memory_order_release);
  std::unique_ptr<RegionBinder::Binding> binding;
  MemoryRegistry::Keys keys{};
  try {
    keys = add_region(base, length, access, shared.get(), &binding, RegionMemory{.doorbell = &state->doorbell});
  } catch (...) {
    ::munmap(base, shared->map_length);
    ::close(shared->memfd);
    throw;
  }
  RDMX_TRACE("allocated %s lkey=0x%x rkey=0x%x access=%s", sizes, keys.lkey, keys.rkey, to_string(access).c_str());
  return std::make_unique<AllocatedRegion>(region_hold(), registry_, base, length, keys, access, std::move(shared),
                                           std::move(binding), doorbell_handoff_);
}

std::unique_ptr<MemoryRegion> RegistryProtectionDomain::register_memory(void* addr, std::size_t length, Access access) {
  char sizes[96];
  std::snprintf(sizes, sizeof(sizes), "addr=%p length=%zu", addr, length);
  if (addr == nullptr && length != 0) {
    throw Error(ErrorCode::InvalidArgument, "cannot register a null buffer",
                {.op = "register_memory", .sizes = sizes, .hint = "pass the buffer's address"});
  }
  check_rights(access, sizes);
  if (reinterpret_cast<std::uintptr_t>(addr) + length < reinterpret_cast<std::uintptr_t>(addr)) {
    throw Error(ErrorCode::InvalidArgument, "region wraps around the address space",
                {.op = "register_memory", .sizes = sizes, .hint = "check the length"});
  }
  const cuda::PointerInfo memory = cuda::classify(addr, length, "register_memory");
  if (memory.type == MemoryType::Cuda && cuda_ == CudaMemorySupport::None) {
    throw Error(
        ErrorCode::NotSupported,
        "the " + provider_ + " provider cannot serve CUDA device memory (GPU " + std::to_string(memory.device) + ")",
        {.op = "register_memory",
         .sizes = sizes,
         .hint = "use a provider whose caps().cuda_memory is not none (`rdmx info` lists them), or copy "
                 "the data to host memory first"});
  }
  // Watched before it is checked, so an unmap after the check cannot be
  // missed. Where hardware does the accesses (a binder), its pins keep the
  // pages and nothing needs watching.
  std::unique_ptr<UnmapWatch> watch;
  if (memory.type == MemoryType::Host && bound_ == nullptr && length > 0) {
    WatchResult w = watch_unmapping(addr, length);
    watch = std::move(w.watch);
    if (!watch) RDMX_TRACE("register_memory %s: not watched for unmapping (%s)", sizes, w.why_not.c_str());
  }
  if (memory.type == MemoryType::Host) check_mapped(addr, length, access, sizes);
  std::unique_ptr<RegionBinder::Binding> binding;
  std::unique_ptr<SharedRegion> shared;
  SharedRegionState* state = nullptr;
  if (memory.type == MemoryType::Cuda && share_device_memory_) {
    shared = share_device_memory(memory, addr, &state);
  } else if (memory.type == MemoryType::Host && (has(access, Access::RemoteWrite) || has(access, Access::RemoteRead))) {
    shared = share_heap_memory();
    shared->heap_watch = watch.get();
  }
  MemoryRegistry::Keys keys{};
  try {
    keys = add_region(addr, length, access, shared.get(), &binding, RegionMemory{memory.type, memory.device},
                      std::move(watch));
  } catch (...) {
    if (shared) release_device_share(*shared, state);
    throw;
  }
  RDMX_TRACE("registered %s lkey=0x%x rkey=0x%x access=%s memory=%s%s", sizes, keys.lkey, keys.rkey,
             to_string(access).c_str(), to_string(memory.type), shared ? " (shared with same-host peers)" : "");
  return std::make_unique<RegisteredRegion>(region_hold(), registry_, addr, length, keys, access, memory,
                                            std::move(binding), std::move(shared), state);
}

MemoryRegistry::Keys RegistryProtectionDomain::add_region(void* addr, std::size_t length, Access access,
                                                          const SharedRegion* shared,
                                                          std::unique_ptr<RegionBinder::Binding>* binding,
                                                          RegionMemory memory, std::unique_ptr<UnmapWatch> watch) {
  if (bound_ == nullptr) return registry_.add(this, addr, length, access, shared, nullptr, memory, std::move(watch));
  *binding = registry_.binder()->bind(*bound_, addr, length, access, memory.type, memory.device);
  const MemoryRegistry::Keys keys{(*binding)->lkey(), (*binding)->rkey()};
  return registry_.add(this, addr, length, access, shared, &keys, memory);
}

}  // namespace rdmx::core
