// SPDX-License-Identifier: MIT
// Copies between processes' mapped memory: glibc's memcpy while the data fits
// the caches, non-temporal stores above RDMX_SHM_NT_THRESHOLD (they skip the
// read-for-ownership of destination lines that will not be read soon, which
// nearly doubles a large copy: docs/journal/PERFORMANCE-HISTORY.md, "Measurements behind the code").
#pragma once

#include <cstddef>

namespace rdmx::shm {

std::size_t nt_threshold();
// RDMX_SHM_SPLIT_THRESHOLD and RDMX_SHM_COPY_THREADS: see ParallelCopy.
std::size_t split_threshold();
std::size_t copy_threads();
void copy_large(void* dst, const void* src, std::size_t n);

}  // namespace rdmx::shm

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <thread>

#include "services/wait.hpp"

namespace rdmx::shm {

// Splits large copies with a helper thread, so a direct WRITE or READ can
// use a second core (twice the bandwidth where one is free: docs/PERFORMANCE.md).
// The caller copies the first half and then, if the helper has
// not started the second yet (asleep, or without a core), takes it back and
// copies it too: never slower than copying alone. RDMX_SHM_COPY_THREADS=0
// disables the helper; RDMX_SHM_SPLIT_THRESHOLD is the
// smallest copy that is split. A sleeping helper is woken only for copies
// that follow each other closely (a stream): waking it for an isolated copy
// (a ping-pong) would take a core from the spinning ranks on a small
// machine and cost more than it saves. One caller at a time (the device lock).
class ParallelCopy {
 public:
  ParallelCopy();
  ~ParallelCopy();
  ParallelCopy(const ParallelCopy&) = delete;
  ParallelCopy& operator=(const ParallelCopy&) = delete;

  void copy(void* dst, const void* src, std::size_t n);
  // The same between this process's `local` and `remote` in process `pid`
  // (cross-memory attach; `write`: into `remote`). False when the kernel
  // refused a part (errno says why).
  bool copy_across(pid_t pid, bool write, std::uint64_t remote, void* local, std::size_t n);

 private:
  enum : std::uint32_t { kIdle, kPosted, kTaken, kDone };
  // One copy, or one half of one: `dst` and `src` are addresses in this
  // process, except the remote side of a copy across processes.
  struct Job {
    pid_t pid = 0;  // 0: a copy within this process
    bool write = false;
    char* dst = nullptr;
    const char* src = nullptr;
    std::size_t n = 0;
  };
  static bool run(const Job& job);
  bool split(const Job& job);
  void helper_main();

  const std::size_t threshold_;
  const bool enabled_;
  std::atomic<std::uint32_t> state_{kIdle};
  std::atomic<bool> helper_awake_{false};  // spinning for the next job, not asleep
  core::Clock::time_point last_end_{};     // when the last large copy finished
  std::atomic<bool> stopping_{false};
  core::WaitWord posted_word_;
  Job second_;  // the helper's half
  std::atomic<bool> second_ok_{true};
  std::thread helper_;  // started on the first split
};

}  // namespace rdmx::shm
