#include "core/memory_registry.hpp"

#include <cstdio>

#include "core/log.hpp"

namespace rdmx::core {

const char* to_string(AccessCheck check) noexcept {
  switch (check) {
    case AccessCheck::Ok: return "ok";
    case AccessCheck::NoSuchKey: return "no region has this key (wrong or deregistered key)";
    case AccessCheck::WrongDomain: return "the region belongs to another protection domain";
    case AccessCheck::OutOfBounds: return "the access falls outside the registered region";
    case AccessCheck::MissingRight: return "the region was not registered with the needed access right";
  }
  return "unknown";
}

std::uint32_t MemoryRegistry::fresh_key_locked() {
  // Random keys, so a peer cannot guess a live key from one it was given.
  for (;;) {
    auto key = static_cast<std::uint32_t>(random_());
    if (key != 0 && !by_lkey_.contains(key) && !by_rkey_.contains(key)) return key;
  }
}

MemoryRegistry::Keys MemoryRegistry::add(const void* domain, void* addr, std::size_t length, Access access) {
  std::unique_lock lock(mutex_);
  Keys keys{};
  keys.lkey = fresh_key_locked();
  auto it =
      by_lkey_.emplace(keys.lkey, Entry{domain, reinterpret_cast<std::uint64_t>(addr), length, access, keys.lkey, 0})
          .first;
  keys.rkey = fresh_key_locked();
  it->second.rkey = keys.rkey;
  by_rkey_.emplace(keys.rkey, &it->second);
  return keys;
}

void MemoryRegistry::remove(std::uint32_t lkey) {
  {
    std::unique_lock lock(mutex_);
    auto it = by_lkey_.find(lkey);
    if (it == by_lkey_.end()) return;
    by_rkey_.erase(it->second.rkey);
    by_lkey_.erase(it);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  // Wait out accesses that checked through a cache before the bump.
  std::lock_guard users(access_locks_mutex_);
  for (std::mutex* m : access_locks_) std::lock_guard wait(*m);
}

void MemoryRegistry::add_access_lock(std::mutex* lock) {
  std::lock_guard users(access_locks_mutex_);
  access_locks_.push_back(lock);
}

void MemoryRegistry::remove_access_lock(std::mutex* lock) {
  std::lock_guard users(access_locks_mutex_);
  std::erase(access_locks_, lock);
}

bool MemoryRegistry::lookup(bool remote, std::uint32_t key, Verdict* out) const {
  std::shared_lock lock(mutex_);
  const Entry* entry = nullptr;
  if (remote) {
    auto it = by_rkey_.find(key);
    if (it != by_rkey_.end()) entry = it->second;
  } else {
    auto it = by_lkey_.find(key);
    if (it != by_lkey_.end()) entry = &it->second;
  }
  if (entry == nullptr) return false;
  *out = {entry->base, entry->length, entry->access, entry->domain};
  return true;
}

AccessCheck MemoryRegistry::check_locked(bool remote, const void* domain, std::uint32_t key, std::uint64_t addr,
                                         std::uint64_t length, Access need) const {
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
  return AccessCheck::Ok;
}

namespace {
class RegisteredRegion final : public MemoryRegion {
 public:
  RegisteredRegion(MemoryRegistry& registry, void* addr, std::size_t length, MemoryRegistry::Keys keys,
                   Access access)
      : MemoryRegion(addr, length, keys.lkey, keys.rkey, access), registry_(registry) {}
  ~RegisteredRegion() override { registry_.remove(lkey()); }

 private:
  MemoryRegistry& registry_;
};
}  // namespace

std::unique_ptr<MemoryRegion> RegistryProtectionDomain::register_memory(void* addr, std::size_t length,
                                                                        Access access) {
  char sizes[96];
  std::snprintf(sizes, sizeof(sizes), "addr=%p length=%zu", addr, length);
  if (addr == nullptr && length != 0) {
    throw Error(ErrorCode::InvalidArgument, "cannot register a null buffer",
                {.op = "register_memory", .sizes = sizes, .hint = "pass the buffer's address"});
  }
  if ((has(access, Access::RemoteWrite) || has(access, Access::RemoteAtomic)) && !has(access, Access::LocalWrite)) {
    throw Error(ErrorCode::InvalidArgument,
                "REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE (as in InfiniBand), got " + to_string(access),
                {.op = "register_memory", .sizes = sizes, .hint = "add Access::LocalWrite"});
  }
  if (reinterpret_cast<std::uintptr_t>(addr) + length < reinterpret_cast<std::uintptr_t>(addr)) {
    throw Error(ErrorCode::InvalidArgument, "region wraps around the address space",
                {.op = "register_memory", .sizes = sizes, .hint = "check the length"});
  }
  auto keys = registry_.add(this, addr, length, access);
  RDMX_TRACE("registered %s lkey=0x%x rkey=0x%x access=%s", sizes, keys.lkey, keys.rkey, to_string(access).c_str());
  return std::make_unique<RegisteredRegion>(registry_, addr, length, keys, access);
}

}  // namespace rdmx::core
