// SPDX-License-Identifier: MIT
#include "driver/device_lock.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <ctime>

namespace rdmx::core {

void DeviceLock::lock_slow() noexcept {
  // Brief spin: the holder usually finishes a pass within a microsecond.
  for (int i = 0; i < 256; ++i) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
    if (try_lock()) return;
  }
  waiters_.fetch_add(1, std::memory_order_acq_rel);
  const timespec slice{0, std::chrono::duration_cast<std::chrono::nanoseconds>(kWaiterSlice).count()};
  while (!try_lock()) {
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&state_), FUTEX_WAIT_PRIVATE, 1, &slice, nullptr, 0);
  }
  waiters_.fetch_sub(1, std::memory_order_acq_rel);
}

void DeviceLock::wake_one() noexcept {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&state_), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

}  // namespace rdmx::core
