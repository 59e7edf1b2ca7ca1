// SPDX-License-Identifier: MIT
#include "services/asymmetric_fence.hpp"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "services/log.hpp"

namespace rdmx::core {

bool asymmetric_fence_available() {
  static const bool available = [] {
    long commands = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    if (commands < 0 || (commands & MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0 ||
        syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) != 0) {
      RDMX_INFO("membarrier(GLOBAL_EXPEDITED) unavailable: shared-memory handshakes pay a full fence on every message");
      return false;
    }
    return true;
  }();
  return available;
}

void heavy_fence(bool asymmetric) {
  if (asymmetric && syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) == 0) return;
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

}  // namespace rdmx::core
