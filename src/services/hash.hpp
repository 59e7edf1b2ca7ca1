// SPDX-License-Identifier: MIT
// A 64-bit FNV-1a digest: names turned into identifiers that every rank
// computes alike (a communicator's tag in a hello, an exchange's key). Not
// for security.
#pragma once

#include <cstdint>
#include <string_view>

namespace rdmx::core {

inline std::uint64_t fnv1a64(std::string_view text) {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

}  // namespace rdmx::core
