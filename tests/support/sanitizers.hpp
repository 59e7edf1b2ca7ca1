// SPDX-License-Identifier: MIT
// What a test must know about the sanitizer it runs under (make test-asan,
// make test-tsan, the check build of make test): allowances for memory the
// sanitizer's runtime holds, not the code under test.
#pragma once

#include <cstddef>

#include "services/race_annotations.hpp"  // RDMX_TSAN

#if defined(__SANITIZE_ADDRESS__)
#define RDMX_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RDMX_TEST_ASAN 1
#endif
#endif

namespace rdmx::test {

#if defined(RDMX_TSAN)
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif

#if defined(RDMX_TSAN)
// TSan keeps shadow memory for every byte a process touches (several bytes
// per byte, resident), and slows it several times: a case that bounds a
// process's resident memory, or needs it to keep pace with a flood, measures
// the sanitizer there. Such cases skip under it, saying so; make test and
// make test-asan measure them.
inline constexpr const char* kResidentMemoryNotMeasurable =
    "ThreadSanitizer's shadow memory is resident in the process measured, and its slowdown throttles the flood";
#else
inline constexpr const char* kResidentMemoryNotMeasurable = nullptr;
#endif

#if defined(RDMX_TEST_ASAN)
// ASan keeps freed memory in quarantine before reusing it (quarantine_size_mb,
// 256 MiB by default on 64-bit Linux), so a process's resident memory counts
// buffers it has already released.
inline constexpr std::size_t kSanitizerQuarantineBytes = std::size_t{256} << 20;
#else
inline constexpr std::size_t kSanitizerQuarantineBytes = 0;
#endif

}  // namespace rdmx::test
