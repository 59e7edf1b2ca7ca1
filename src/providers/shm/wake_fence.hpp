// The fences of the sleep/wake handshake between a producer and a consumer
// that is about to block (Dekker's pattern: each side stores, then loads the
// other side's word). The producer runs its half on every message, the
// sleeper only before it blocks, so the cost goes to the sleeper: with
// membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) the sleeper forces a full
// barrier on every running thread of every registered process, and the
// producer needs only a compiler barrier. Without membarrier both sides use a
// full fence. Every process that opens a shm device registers.
#pragma once

#include <atomic>

namespace rdmx::shm {

// Registers this process (once) and tells whether the asymmetric form is in use.
bool asymmetric_wake_fence();

// After publishing, before reading the consumer's sleeping mark.
inline void producer_fence(bool asymmetric) {
  if (asymmetric) {
    std::atomic_signal_fence(std::memory_order_seq_cst);
  } else {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
}

// After setting the sleeping marks, before re-checking the rings.
void sleeper_fence(bool asymmetric);

}  // namespace rdmx::shm
