// SPDX-License-Identifier: MIT
// rdmx/half.hpp: the 16-bit floating-point formats the collectives reduce
// (DataType::Float16, DataType::BFloat16), converted to and from fp32 as
// the library converts them, so that tools and tests that fill or check
// such buffers agree with it bit for bit.
#pragma once

#include <cstdint>

#include "rdmx/export.hpp"

RDMX_API_BEGIN

namespace rdmx {

// IEEE binary16. Bit-exact with F16C's vcvtph2ps / vcvtps2ph (round to
// nearest even): a signalling fp16 NaN widens to a quiet fp32 NaN, an fp32
// NaN narrows to a quiet fp16 NaN keeping its sign and upper payload, and
// overflow gives infinity.
float half_to_float(std::uint16_t h) noexcept;
std::uint16_t float_to_half(float f) noexcept;

// bfloat16, the upper half of an fp32: widening is exact (NaN bits kept);
// narrowing rounds to nearest even, and a NaN stays NaN (sign and upper
// payload, quiet bit 0x0040 set).
float bf16_to_float(std::uint16_t h) noexcept;
std::uint16_t float_to_bf16(float f) noexcept;

}  // namespace rdmx
RDMX_API_END
