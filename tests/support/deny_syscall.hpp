// SPDX-License-Identifier: MIT
// Makes one system call fail with EPERM in the calling process and every
// process it starts (a seccomp filter, as Docker's default profile does to
// userfaultfd): for testing the paths taken where a host refuses a call.
// Only async-signal-safe calls inside: usable between fork and exec.
#pragma once

namespace rdmx::test {

// Returns false (errno set) if the filter could not be installed.
bool deny_syscall(long number) noexcept;

}  // namespace rdmx::test
