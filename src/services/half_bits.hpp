// SPDX-License-Identifier: MIT
// fp16 and bf16 to and from fp32, as rdmx/half.hpp states the rules, inline
// for host and device: the public functions (half.cpp), the CPU kernels and
// the GPU kernels (coll/cuda) all convert through these.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define RDMX_HOST_DEVICE __host__ __device__
#else
#define RDMX_HOST_DEVICE
#endif

namespace rdmx::core {

// The same bits as another type of the same size (std::bit_cast is not
// available in device code; memcpy of a few bytes compiles to a move).
template <class To, class From>
RDMX_HOST_DEVICE inline To bits_as(From from) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  std::memcpy(&to, &from, sizeof to);
  return to;
}

// fp16 <-> fp32, bit-exact with F16C (rdmx/half.hpp states the rules).
RDMX_HOST_DEVICE inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1Fu;
  std::uint32_t mantissa = h & 0x3FFu;
  std::uint32_t bits;
  if (exponent == 0x1F) {
    // inf, or NaN: vcvtph2ps keeps the payload and sets the quiet bit.
    bits = sign | 0x7F800000u | (mantissa << 13) | (mantissa != 0 ? 0x00400000u : 0u);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {
    // Denormal: mantissa * 2^-24, normalised (bit 10 becomes the implicit bit).
    std::uint32_t e = 113;  // fp32 exponent field of 2^-14
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((mantissa & 0x3FFu) << 13);
  }
  return bits_as<float>(bits);
}

RDMX_HOST_DEVICE inline std::uint16_t float_to_half(float f) {
  const std::uint32_t bits = bits_as<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t x = bits & 0x7FFFFFFFu;
  if (x > 0x7F800000u)  // NaN: quiet, upper payload bits
    return static_cast<std::uint16_t>(sign | 0x7E00u | ((x >> 13) & 0x3FFu));
  if (x >= 0x477FF000u)  // at or past halfway between 65504 and 65536 (ties go to even: inf)
    return static_cast<std::uint16_t>(sign | 0x7C00u);
  if (x >= 0x38800000u) {  // normal half: rebias, round the 13 dropped bits to nearest even
    const std::uint32_t y = x - 0x38000000u;
    return static_cast<std::uint16_t>(sign | ((y + 0x0FFFu + ((y >> 13) & 1u)) >> 13));
  }
  if (x <= 0x33000000u)  // at most half the smallest denormal 2^-24: rounds to zero
    return sign;
  // Denormal half: round (x's value) / 2^-24 to an integer, nearest even.
  const std::uint32_t e = x >> 23;  // 102..112 here
  const std::uint32_t mantissa = (x & 0x7FFFFFu) | 0x800000u;
  const std::uint32_t shift = 126 - e;  // 14..24
  std::uint32_t q = mantissa >> shift;
  const std::uint32_t rest = mantissa & ((1u << shift) - 1);
  const std::uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (q & 1u) != 0)) ++q;
  return static_cast<std::uint16_t>(sign | q);
}

RDMX_HOST_DEVICE inline float bf16_to_float(std::uint16_t h) {
  return bits_as<float>(static_cast<std::uint32_t>(h) << 16);
}

RDMX_HOST_DEVICE inline std::uint16_t float_to_bf16(float f) {
  const std::uint32_t bits = bits_as<std::uint32_t>(f);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  return static_cast<std::uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

}  // namespace rdmx::core
