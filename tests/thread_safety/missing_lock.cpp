// SPDX-License-Identifier: MIT
// Proof that the thread-safety build fails where a lock is missing: CTest
// parses this file with the flags of the thread_safety target, once per
// RDMX_CASE, and expects clang's error for that case. RDMX_CASE 0 is the
// correct code and must parse cleanly.
#include "driver/device_lock.hpp"
#include "services/mutex.hpp"

namespace {

class Counter {
 public:
  void add() {
#if RDMX_CASE == 1  // a *_locked function called without its lock
    add_locked();
#elif RDMX_CASE == 2  // guarded data written without its lock
    ++count_;
#elif RDMX_CASE == 3  // a try_lock() whose failure is ignored
    mutex_.try_lock();
    add_locked();
    mutex_.unlock();
#else
    rdmx::core::LockGuard lock(mutex_);
    add_locked();
#endif
  }

 private:
  void add_locked() RDMX_REQUIRES(mutex_) { ++count_; }

  rdmx::core::Mutex mutex_;
  int count_ RDMX_GUARDED_BY(mutex_) = 0;
};

class Engine {
 public:
  int pass() {
#if RDMX_CASE == 4  // the device lock, used after its release
    rdmx::core::LockGuard guard(lock_);
    lock_.unlock();
    return pass_locked();
#else
    if (!lock_.try_lock()) return 0;
    rdmx::core::LockGuard guard(lock_, rdmx::core::kAdoptLock);
    return pass_locked();
#endif
  }

 private:
  int pass_locked() RDMX_REQUIRES(lock_) { return ++passes_; }

  rdmx::core::DeviceLock lock_;
  int passes_ RDMX_GUARDED_BY(lock_) = 0;
};

}  // namespace

int main() {
  Counter counter;
  counter.add();
  Engine engine;
  return engine.pass() > 0 ? 0 : 1;
}
