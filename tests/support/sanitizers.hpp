// SPDX-License-Identifier: MIT
// What a test must know about the sanitizer it runs under (make test-asan,
// the check build of make test): allowances for memory the sanitizer's
// runtime holds, not the code under test.
#pragma once

#include <cstddef>

#if defined(__SANITIZE_ADDRESS__)
#define RDMX_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RDMX_TEST_ASAN 1
#endif
#endif

namespace rdmx::test {

#if defined(RDMX_TEST_ASAN)
// ASan keeps freed memory in quarantine before reusing it (quarantine_size_mb,
// 256 MiB by default on 64-bit Linux), so a process's resident memory counts
// buffers it has already released.
inline constexpr std::size_t kSanitizerQuarantineBytes = std::size_t{256} << 20;
#else
inline constexpr std::size_t kSanitizerQuarantineBytes = 0;
#endif

}  // namespace rdmx::test
