// SPDX-License-Identifier: MIT
// Random numbers from the kernel's source (getrandom), for what a peer must
// not predict: memory keys, connection nonces. A generator seeded once is
// recovered from a few of its outputs; the kernel's source is not.
#pragma once

#include <cstdint>

namespace rdmx::core {

// Throws rdmx::Error (System) when the kernel gives no random bytes.
std::uint64_t kernel_random64();

}  // namespace rdmx::core
