// SPDX-License-Identifier: MIT
// Dekker-style handshakes between processes (each side stores its flag, then
// loads the other's) where one side runs on every message and the other
// rarely: the shm provider's wake-up (producer publishes, then checks whether
// the consumer sleeps) and direct copies into a peer's region (the copier
// marks itself busy, then checks that the region is live; deregistration
// clears `live`, then waits for busy copiers). The frequent side pays only a
// compiler barrier; the rare side calls membarrier(GLOBAL_EXPEDITED), which
// runs a full barrier on every running thread of every registered process.
// Without membarrier both sides use a full fence. Every process that opens a
// shm device registers.
#pragma once

#include <atomic>

namespace rdmx::core {

// Registers this process (once) and tells whether the asymmetric form is in use.
bool asymmetric_fence_available();

// The frequent side, between its store and its load.
inline void light_fence(bool asymmetric) {
  if (asymmetric) {
    std::atomic_signal_fence(std::memory_order_seq_cst);
  } else {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
}

// The rare side, between its store and its load.
void heavy_fence(bool asymmetric);

}  // namespace rdmx::core
