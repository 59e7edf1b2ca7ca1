// SPDX-License-Identifier: MIT
#include "providers/shm/copy.hpp"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "providers/shm/cross_memory.hpp"
#include "services/config.hpp"
#include "services/settings.hpp"

namespace rdmx::shm {
namespace {

constexpr core::SizeSetting kNtThreshold{"RDMX_SHM_NT_THRESHOLD", 16u << 20,
                                         "shm: direct copies at least this large use non-temporal stores"};
RDMX_SETTING(kNtThreshold);
constexpr core::SizeSetting kSplitThreshold{"RDMX_SHM_SPLIT_THRESHOLD", 512u << 10,
                                            "shm: direct copies at least this large are split over two threads"};
RDMX_SETTING(kSplitThreshold);
constexpr core::IntegerSetting kCopyThreads{
    "RDMX_SHM_COPY_THREADS", 1, 0, 1, "threads", "shm: 0 disables the copy helper thread"};
RDMX_SETTING(kCopyThreads);

__attribute__((target("avx2"))) void copy_nt_avx2(void* dst, const void* src, std::size_t n) {
  auto* d = static_cast<std::uint8_t*>(dst);
  const auto* s = static_cast<const std::uint8_t*>(src);
  // Align the destination to 32 bytes with an ordinary copy.
  std::size_t head = (32 - (reinterpret_cast<std::uintptr_t>(d) & 31)) & 31;
  if (head > n) head = n;
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  std::size_t blocks = n / 128;
  for (std::size_t i = 0; i < blocks; ++i) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32));
    __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 64));
    __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 96), e);
    s += 128;
    d += 128;
  }
  _mm_sfence();  // streaming stores are weakly ordered: complete them before anything that publishes the copy
  std::memcpy(d, s, n % 128);
}

bool has_avx2() {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
}
}  // namespace

std::size_t nt_threshold() {
  static const std::size_t threshold = kNtThreshold.read();
  return threshold;
}

void copy_large(void* dst, const void* src, std::size_t n) {
  if (n >= nt_threshold() && has_avx2()) {
    copy_nt_avx2(dst, src, n);
  } else {
    std::memcpy(dst, src, n);
  }
}

}  // namespace rdmx::shm

namespace rdmx::shm {

std::size_t split_threshold() { return kSplitThreshold.read(); }
std::size_t copy_threads() { return static_cast<std::size_t>(kCopyThreads.read()); }

ParallelCopy::ParallelCopy() : threshold_(split_threshold()), enabled_(copy_threads() > 0) {}

ParallelCopy::~ParallelCopy() {
  stopping_.store(true);
  posted_word_.notify_all();
  if (helper_.joinable()) helper_.join();
}

void ParallelCopy::copy(void* dst, const void* src, std::size_t n) {
  split({.dst = static_cast<char*>(dst), .src = static_cast<const char*>(src), .n = n});
}

bool ParallelCopy::copy_across(pid_t pid, bool write, std::uint64_t remote, void* local, std::size_t n) {
  auto* remote_bytes = reinterpret_cast<char*>(remote);
  auto* local_bytes = static_cast<char*>(local);
  return split({.pid = pid,
                .write = write,
                .dst = write ? remote_bytes : local_bytes,
                .src = write ? local_bytes : remote_bytes,
                .n = n});
}

bool ParallelCopy::run(const Job& job) {
  if (job.pid == 0) {
    copy_large(job.dst, job.src, job.n);
    return true;
  }
  const iovec local{const_cast<char*>(job.write ? job.src : job.dst), job.n};
  const iovec remote{const_cast<char*>(job.write ? job.dst : job.src), job.n};
  const ssize_t moved = job.write ? write_to_process(job.pid, &local, 1, &remote, 1, job.n)
                                  : read_from_process(job.pid, &local, 1, &remote, 1, job.n);
  return moved == static_cast<ssize_t>(job.n);
}

bool ParallelCopy::split(const Job& job) {
  if (!enabled_ || job.n < threshold_) return run(job);
  const auto now = core::Clock::now();
  const bool streaming = now - last_end_ < std::chrono::microseconds(20);
  if (!helper_awake_.load(std::memory_order_relaxed) && !streaming) {
    const bool ok = run(job);
    last_end_ = core::Clock::now();
    return ok;
  }
  if (!helper_.joinable()) helper_ = std::thread([this] { helper_main(); });
  // Halves on a 64-byte boundary, so neither copy shares a cache line.
  const std::size_t first = (job.n / 2) & ~std::size_t{63};
  second_ = job;
  second_.dst += first;
  second_.src += first;
  second_.n -= first;
  state_.store(kPosted, std::memory_order_release);
  posted_word_.notify_all();
  Job mine = job;
  mine.n = first;
  bool ok = run(mine);
  std::uint32_t expected = kPosted;
  if (state_.compare_exchange_strong(expected, kIdle, std::memory_order_acq_rel)) {
    ok = run(second_) && ok;  // the helper never started: do it here
  } else {
    while (state_.load(std::memory_order_acquire) != kDone) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
    ok = second_ok_.load(std::memory_order_relaxed) && ok;
    state_.store(kIdle, std::memory_order_relaxed);
  }
  last_end_ = core::Clock::now();
  return ok;
}

void ParallelCopy::helper_main() {
  // Streams post the next job within microseconds; a helper that spins longer
  // would only take a core from oversubscribed ranks.
  const auto spin = std::min<std::chrono::microseconds>(core::spin_budget(), std::chrono::microseconds(50));
  while (!stopping_.load(std::memory_order_relaxed)) {
    const std::uint32_t seen = posted_word_.epoch();
    auto spin_end = core::Clock::now() + spin;
    helper_awake_.store(true, std::memory_order_relaxed);
    while (state_.load(std::memory_order_acquire) != kPosted && !stopping_.load(std::memory_order_relaxed)) {
      if (core::Clock::now() > spin_end) {
        helper_awake_.store(false, std::memory_order_relaxed);
        posted_word_.block(seen, core::Clock::now() + std::chrono::milliseconds(100));
        break;
      }
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
    std::uint32_t expected = kPosted;
    if (!state_.compare_exchange_strong(expected, kTaken, std::memory_order_acq_rel)) continue;
    second_ok_.store(run(second_), std::memory_order_relaxed);
    state_.store(kDone, std::memory_order_release);
  }
}

}  // namespace rdmx::shm
