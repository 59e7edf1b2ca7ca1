// SPDX-License-Identifier: MIT
// The unmap watch on the real kernel: every way a mapping's pages can change
// under a registration is reported, unrelated changes are not, and the
// report is visible as soon as the call that made it has returned.
#include "services/unmap_watch.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace {

using rdmx::core::read_unmap_events;
using rdmx::core::unmap_watch_support;
using rdmx::core::watch_unmapping;

constexpr std::size_t kLen = 64 * 1024;

class UnmapWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto support = unmap_watch_support();
    if (!support.available) GTEST_SKIP() << "no unmap watching in this process: " << support.how;
  }
  static char* map(std::size_t len = kLen, void* at = nullptr, int extra = 0) {
    void* p = ::mmap(at, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | extra, -1, 0);
    EXPECT_NE(p, MAP_FAILED) << std::strerror(errno);
    std::memset(p, 1, len);
    return static_cast<char*>(p);
  }
  static bool unmapped(const rdmx::core::UnmapWatch& w) {
    read_unmap_events();
    return w.unmapped();
  }
};

TEST_F(UnmapWatchTest, MunmapIsReported) {
  char* p = map();
  auto w = watch_unmapping(p + 100, 5000);
  ASSERT_NE(w.watch, nullptr) << w.why_not;
  EXPECT_FALSE(unmapped(*w.watch));
  p[200] = 2;  // writing watched pages changes nothing
  EXPECT_FALSE(unmapped(*w.watch));
  ASSERT_EQ(::munmap(p, kLen), 0);
  EXPECT_TRUE(unmapped(*w.watch));
}

TEST_F(UnmapWatchTest, DroppedPagesAreReportedAndTouchingThemDoesNotBlock) {
  char* p = map();
  auto w = watch_unmapping(p, kLen);
  ASSERT_NE(w.watch, nullptr) << w.why_not;
  ASSERT_EQ(::madvise(p + 8192, 4096, MADV_DONTNEED), 0);
  EXPECT_TRUE(unmapped(*w.watch));
  // The dropped page faults back in as zeros, not through the watcher.
  EXPECT_EQ(p[8192], 0);
  p[8192] = 3;
  EXPECT_EQ(p[8192], 3);
  ::munmap(p, kLen);
}

TEST_F(UnmapWatchTest, MremapAndMapFixedOverAreReported) {
  char* p = map();
  auto moved = watch_unmapping(p, kLen);
  ASSERT_NE(moved.watch, nullptr) << moved.why_not;
  // Room to move into: a reservation twice as large, released again.
  char* far = map(4 * kLen);
  ::munmap(far, 4 * kLen);
  void* q = ::mremap(p, kLen, 2 * kLen, MREMAP_MAYMOVE | MREMAP_FIXED, far);
  ASSERT_NE(q, MAP_FAILED) << std::strerror(errno);
  EXPECT_TRUE(unmapped(*moved.watch));
  ::munmap(q, 2 * kLen);

  char* r = map();
  auto over = watch_unmapping(r, kLen);
  ASSERT_NE(over.watch, nullptr) << over.why_not;
  char* again = map(kLen, r, MAP_FIXED);
  ASSERT_EQ(again, r);
  EXPECT_TRUE(unmapped(*over.watch));
  ::munmap(r, kLen);
}

TEST_F(UnmapWatchTest, UnrelatedChangesAreNotReported) {
  char* a = map();
  char* b = map();
  auto w = watch_unmapping(a, kLen);
  ASSERT_NE(w.watch, nullptr) << w.why_not;
  ASSERT_EQ(::munmap(b, kLen), 0);
  ASSERT_EQ(::madvise(a, 0, MADV_DONTNEED), 0);  // an empty range
  EXPECT_FALSE(unmapped(*w.watch));
  // Two watches of one range: ending one keeps the other's pages watched.
  auto second = watch_unmapping(a, kLen);
  ASSERT_NE(second.watch, nullptr) << second.why_not;
  w.watch.reset();
  ASSERT_EQ(::munmap(a, kLen), 0);
  EXPECT_TRUE(unmapped(*second.watch));
}

// The guarantee the registration cache relies on: once munmap has returned
// in any thread, the next read shows it.
TEST_F(UnmapWatchTest, AnUnmapInAnotherThreadShowsOnceItReturned) {
  for (int round = 0; round < 50; ++round) {
    char* p = map();
    auto w = watch_unmapping(p, kLen);
    ASSERT_NE(w.watch, nullptr) << w.why_not;
    std::thread([p] { ::munmap(p, kLen); }).join();
    ASSERT_TRUE(unmapped(*w.watch)) << "round " << round;
  }
}

// Only anonymous and shmem (tmpfs, memfd) pages can be watched; anything
// else is refused with a reason.
TEST_F(UnmapWatchTest, FileMappingsAreRefusedWithAReason) {
  const int fd = ::open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  struct statfs fs {};
  ASSERT_EQ(::fstatfs(fd, &fs), 0);
  void* p = ::mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
  ASSERT_NE(p, MAP_FAILED);
  auto w = watch_unmapping(p, 4096);
  if (fs.f_type == TMPFS_MAGIC) {
    EXPECT_NE(w.watch, nullptr) << "a tmpfs file is shmem: " << w.why_not;
  } else {
    EXPECT_EQ(w.watch, nullptr);
    EXPECT_NE(w.why_not.find("file mapping"), std::string::npos) << w.why_not;
  }
  ::munmap(p, 4096);
  ::close(fd);
}

// A child's pages are not watched by the parent's descriptor: its copies of
// the parent's watches read as unmapped, and it can watch its own memory.
TEST_F(UnmapWatchTest, AForkedChildDistrustsInheritedWatchesAndWatchesItsOwn) {
  char* p = map();
  auto w = watch_unmapping(p, kLen);
  ASSERT_NE(w.watch, nullptr) << w.why_not;
  // The reader thread must be past its start before the fork: LLVM 14's ASan
  // allocator is not fork-safe, so a thread inside malloc at the fork leaves
  // its lock held in the child, where the child's own reader then blocks on
  // it. A munmap of watched pages returns only once that thread read the event.
  {
    char* scratch = map(4096);
    auto settle = watch_unmapping(scratch, 4096);
    ASSERT_NE(settle.watch, nullptr) << settle.why_not;
    ASSERT_EQ(::munmap(scratch, 4096), 0);
    ASSERT_TRUE(unmapped(*settle.watch));
  }
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int bad = 0;
    if (!w.watch->unmapped()) bad |= 1;
    char* mine = static_cast<char*>(::mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    auto own = watch_unmapping(mine, kLen);
    if (own.watch == nullptr) bad |= 2;
    if (own.watch && (read_unmap_events(), own.watch->unmapped())) bad |= 4;
    ::munmap(mine, kLen);
    if (own.watch && !(read_unmap_events(), own.watch->unmapped())) bad |= 8;
    std::_Exit(bad);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "bits: 1 inherited watch trusted, 2 cannot watch, 4 false report, 8 missed unmap";
  EXPECT_FALSE(unmapped(*w.watch)) << "the child's exit is not the parent's unmap";
  ::munmap(p, kLen);
}

}  // namespace
