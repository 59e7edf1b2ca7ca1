// SPDX-License-Identifier: MIT
#include "rdmx/half.hpp"
#include "services/half_bits.hpp"

namespace rdmx {

float half_to_float(std::uint16_t h) noexcept { return core::half_to_float(h); }
std::uint16_t float_to_half(float f) noexcept { return core::float_to_half(f); }
float bf16_to_float(std::uint16_t h) noexcept { return core::bf16_to_float(h); }
std::uint16_t float_to_bf16(float f) noexcept { return core::float_to_bf16(f); }

}  // namespace rdmx
