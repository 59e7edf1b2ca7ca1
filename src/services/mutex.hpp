// SPDX-License-Identifier: MIT
// Mutexes and scoped guards the thread-safety analysis can follow
// (services/thread_annotations.hpp): libstdc++'s std::mutex and std::lock_guard
// carry no annotations, so code guarded by them would be invisible to it.
// The wrappers add nothing at run time.
#pragma once

#include <condition_variable>
#include <mutex>
#include <shared_mutex>

#include "services/thread_annotations.hpp"

namespace rdmx::core {

class RDMX_CAPABILITY("mutex") Mutex {
 public:
  void lock() RDMX_ACQUIRE() { mutex_.lock(); }
  void unlock() RDMX_RELEASE() { mutex_.unlock(); }
  bool try_lock() RDMX_TRY_ACQUIRE(true) { return mutex_.try_lock(); }

 private:
  std::mutex mutex_;
};

class RDMX_CAPABILITY("shared mutex") SharedMutex {
 public:
  void lock() RDMX_ACQUIRE() { mutex_.lock(); }
  void unlock() RDMX_RELEASE() { mutex_.unlock(); }
  void lock_shared() RDMX_ACQUIRE_SHARED() { mutex_.lock_shared(); }
  void unlock_shared() RDMX_RELEASE_SHARED() { mutex_.unlock_shared(); }
  void assert_held_shared() const RDMX_ASSERT_SHARED_CAPABILITY(this) {}

 private:
  std::shared_mutex mutex_;
};

// Marks a guard constructed for a lock the caller already holds (after a
// successful try_lock()), as std::adopt_lock.
struct AdoptLock {
  explicit AdoptLock() = default;
};
inline constexpr AdoptLock kAdoptLock{};

// Holds `lock` for the guard's scope; any type with lock() and unlock().
template <class Lockable>
class RDMX_SCOPED_CAPABILITY LockGuard {
 public:
  explicit LockGuard(Lockable& lock) RDMX_ACQUIRE(lock) : lock_(lock) { lock_.lock(); }
  LockGuard(Lockable& lock, AdoptLock) RDMX_REQUIRES(lock) : lock_(lock) {}
  ~LockGuard() RDMX_RELEASE() { lock_.unlock(); }
  LockGuard(const LockGuard&) = delete;
  LockGuard& operator=(const LockGuard&) = delete;

 private:
  Lockable& lock_;
};

// Holds a shared (reader) lock for the guard's scope.
template <class Lockable>
class RDMX_SCOPED_CAPABILITY SharedLockGuard {
 public:
  explicit SharedLockGuard(Lockable& lock) RDMX_ACQUIRE_SHARED(lock) : lock_(lock) { lock_.lock_shared(); }
  ~SharedLockGuard() RDMX_RELEASE() { lock_.unlock_shared(); }
  SharedLockGuard(const SharedLockGuard&) = delete;
  SharedLockGuard& operator=(const SharedLockGuard&) = delete;

 private:
  Lockable& lock_;
};

// A guard a condition variable can release while it waits
// (std::condition_variable_any), and that can be released early.
class RDMX_SCOPED_CAPABILITY UniqueLock {
 public:
  explicit UniqueLock(Mutex& mutex) RDMX_ACQUIRE(mutex) : mutex_(mutex) { mutex_.lock(); }
  ~UniqueLock() RDMX_RELEASE() {
    if (owned_) mutex_.unlock();
  }
  void lock() RDMX_ACQUIRE() {
    mutex_.lock();
    owned_ = true;
  }
  void unlock() RDMX_RELEASE() {
    owned_ = false;
    mutex_.unlock();
  }
  UniqueLock(const UniqueLock&) = delete;
  UniqueLock& operator=(const UniqueLock&) = delete;

 private:
  Mutex& mutex_;
  bool owned_ = true;
};

using ConditionVariable = std::condition_variable_any;

}  // namespace rdmx::core
