// SPDX-License-Identifier: MIT
// How the software providers keep DeviceCaps::ordered_write_placement: the
// last 8 bytes of an RDMA WRITE are held back while the rest is copied, then
// stored with one release store, so a target CPU that sees them (acquire)
// sees the whole WRITE.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace rdmx::core {

// True when a WRITE of `length` bytes to `addr` ends on an 8-byte boundary
// and is long enough to have a last word to hold back.
inline bool has_last_word(std::uint64_t addr, std::uint64_t length) noexcept {
  return length >= 8 && (addr + length) % 8 == 0;
}

// Stores the held-back last word at `where` (8-byte aligned).
inline void store_last_word(void* where, const void* word) noexcept {
  std::uint64_t value;
  std::memcpy(&value, word, 8);
  std::atomic_ref<std::uint64_t>(*static_cast<std::uint64_t*>(where)).store(value, std::memory_order_release);
}

// Copies `n` bytes to `dst`, which ends a WRITE, with its last word stored last.
inline void copy_last_word_last(void* dst, const void* src, std::size_t n) noexcept {
  if (!has_last_word(reinterpret_cast<std::uintptr_t>(dst), n)) {
    std::memcpy(dst, src, n);
    return;
  }
  std::memcpy(dst, src, n - 8);
  store_last_word(static_cast<char*>(dst) + n - 8, static_cast<const char*>(src) + n - 8);
}

}  // namespace rdmx::core
