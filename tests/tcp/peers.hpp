// SPDX-License-Identifier: MIT
// The parts the tcp provider's authentication and attack cases share: the
// rank under attack and the one attacking, the job's secret and another.
#pragma once

namespace rdmx::test {

inline constexpr int kVictim = 0;
inline constexpr int kAttacker = 1;
inline constexpr const char* kSecret = "0123456789abcdef0123456789abcdef";
inline constexpr const char* kOtherSecret = "fedcba9876543210fedcba9876543210";

}  // namespace rdmx::test
