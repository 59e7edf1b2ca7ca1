// SPDX-License-Identifier: MIT
// Deregistering a region that peers copy into directly waits for their
// busy slots: a peer stopped between setting its slot and its copy would
// copy into freed memory when it resumes. A slot left busy by a process
// that is gone (killed inside a copy) is not waited for.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include "driver/shared_region.hpp"
#include "services/config.hpp"

namespace rdmx::core {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A heap region offered once, its slot 0 given to `pid` and left busy.
std::unique_ptr<SharedRegion> region_busy_for(int pid) {
  auto shared = share_heap_memory();
  const StatePage page = heap_state_page(*shared);
  EXPECT_GE(page.memfd, 0) << "no state page could be made";
  if (page.state == nullptr) return shared;
  shared->slots_given.store(1);
  shared->slot_pids[0].store(pid);
  page.state->slots[0].busy.store(1);
  return shared;
}

TEST(SharedRegionRetire, ASlotLeftBusyByADeadProcessIsNotWaitedFor) {
  ::setenv("RDMX_TIMEOUT", "20", 1);
  ASSERT_EQ(timeout(), 20000ms) << "RDMX_TIMEOUT was read before the test set it";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  // Exited, not reaped: a zombie, as a killed rank is until its launcher waits.
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);
  auto shared = region_busy_for(child);
  const auto start = Clock::now();
  retire_heap_share(*shared);
  const auto took = Clock::now() - start;
  ::waitpid(child, nullptr, 0);
  EXPECT_LT(took, 10s) << "deregistration waited " << std::chrono::duration<double>(took).count()
                       << " s for a slot whose process had exited (RDMX_TIMEOUT is 20 s)";
}

TEST(SharedRegionRetire, ASlotHeldByAStoppedProcessIsWaitedForUntilTheTimeout) {
  ::setenv("RDMX_TIMEOUT", "1", 1);
  ASSERT_EQ(timeout(), 1000ms) << "RDMX_TIMEOUT was read before the test set it";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::raise(SIGSTOP);
    ::_exit(0);
  }
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(child), &info, WSTOPPED | WNOWAIT), 0);
  auto shared = region_busy_for(child);
  const auto start = Clock::now();
  retire_heap_share(*shared);
  const auto took = Clock::now() - start;
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_GE(took, 900ms) << "deregistration returned while a live process held a busy slot";
}

}  // namespace
}  // namespace rdmx::core
