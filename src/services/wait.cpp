// SPDX-License-Identifier: MIT
#include "services/wait.hpp"

#include <linux/futex.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <ctime>
#include <thread>

#include "services/config.hpp"

namespace rdmx::core {
namespace {

std::atomic<bool> g_aborted{false};
// Blocked waiters wake at least this often to re-check abort and their condition.
constexpr auto kBlockSlice = std::chrono::milliseconds(100);

void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t seen, std::chrono::nanoseconds limit, bool shared) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(limit.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(limit.count() % 1000000000);
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), shared ? FUTEX_WAIT : FUTEX_WAIT_PRIVATE, seen, &ts,
          nullptr, 0);
}

void wake(WakeWords& words, bool shared) noexcept {
  words.epoch.fetch_add(1, std::memory_order_acq_rel);
  if (words.sleepers.load(std::memory_order_acquire) != 0) {
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&words.epoch), shared ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE,
            INT_MAX, nullptr, nullptr, 0);
  }
}

// Short sleeps mean what they say: the kernel's default timer slack (50 us)
// would turn every 20 us slice into 70 us. Set once per thread.
void precise_sleeps() {
  thread_local bool done = false;
  if (done) return;
  done = true;
  ::prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);  // 1 us, in ns
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

void ring(WakeWords& words) noexcept { wake(words, true); }

void WaitWord::notify_all() noexcept { wake(*words_, shared_); }

void WaitWord::block(std::uint32_t seen, Clock::time_point deadline) const noexcept {
  auto now = Clock::now();
  if (now >= deadline) return;
  auto limit = std::min<Clock::duration>(deadline - now, kBlockSlice);
  words_->sleepers.fetch_add(1, std::memory_order_acq_rel);
  if (words_->epoch.load(std::memory_order_acquire) == seen) {
    futex_wait(&words_->epoch, seen, std::chrono::duration_cast<std::chrono::nanoseconds>(limit), shared_);
  }
  words_->sleepers.fetch_sub(1, std::memory_order_acq_rel);
}

WaitResult wait_until(const std::function<bool()>& ready, const Doorbell* word, Clock::time_point deadline,
                      const WaitHooks& hooks) {
  if (ready()) return WaitResult::Ready;
  // Spin phase: cheap checks, driving progress from this thread. The clock
  // is first read after some spins: most waits end before that.
  const Clock::duration spin = hooks.spin.count() >= 0 ? Clock::duration(hooks.spin) : Clock::duration(spin_budget());
  Clock::time_point spin_end{};
  for (unsigned i = 0;; ++i) {
    if (hooks.progress) hooks.progress();
    if (ready()) return WaitResult::Ready;
    if (g_aborted.load(std::memory_order_relaxed)) return WaitResult::Aborted;
    if ((i & 15) == 15) {
      auto now = Clock::now();
      if (spin_end == Clock::time_point{}) spin_end = now + spin;
      if (now >= deadline) return WaitResult::Timeout;
      if (now >= spin_end) break;
    }
    cpu_relax();
  }
  if (hooks.before_block) hooks.before_block();
  // Block phase: sleep until notified, re-check, bounded by the deadline.
  // Without a word to be woken through (a peer's WRITE landing in shared
  // memory wakes nobody), sleep in slices of an eighth of the time waited so
  // far, from 20 us to 1 ms: a wait overshoots its event by at most about
  // 1/8 of its length. Doubling slices overshot by up to 1 ms, and in a
  // chain of waits (a ring) every rank then slept through its neighbour's
  // data (docs/journal/PERFORMANCE-HISTORY.md, "Measurements behind the code"). Growing slices also keep two waiters
  // that wait on each other from falling into step.
  if (word == nullptr) precise_sleeps();
  const Clock::time_point waiting_since = spin_end - spin;
  for (;;) {
    std::uint32_t seen = word != nullptr ? word->epoch() : 0;
    if (hooks.progress) hooks.progress();
    if (ready()) return WaitResult::Ready;
    if (g_aborted.load(std::memory_order_relaxed)) return WaitResult::Aborted;
    auto now = Clock::now();
    if (now >= deadline) return WaitResult::Timeout;
    if (word != nullptr) {
      word->block(seen, deadline);
    } else {
      const Clock::duration slice = std::clamp<Clock::duration>(
          (now - waiting_since) / 8, std::chrono::microseconds(20), std::chrono::microseconds(1000));
      std::this_thread::sleep_for(std::min<Clock::duration>(deadline - now, slice));
    }
  }
}

void abort_waits() noexcept { g_aborted.store(true, std::memory_order_relaxed); }
void clear_abort() noexcept { g_aborted.store(false, std::memory_order_relaxed); }
bool waits_aborted() noexcept { return g_aborted.load(std::memory_order_relaxed); }

}  // namespace rdmx::core
