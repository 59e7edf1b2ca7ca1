// SPDX-License-Identifier: MIT
// Collectives on verbs keep user-buffer registrations between operations
// (RegistrationCache). The NIC pins the pages a buffer had when it was
// registered, so these cases change the pages behind a buffer between two
// operations, the ways applications do, and check that the results come from
// the new pages, not from the pinned old ones.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include <cerrno>
#include <cstring>

#include "rdmx/comm.hpp"
#include "rdmx/registration_cache.hpp"
#include "support/deny_syscall.hpp"
#include "support/harness.hpp"
#include "support/verbs_util.hpp"

namespace rdmx::test {
namespace {

constexpr std::size_t kCount = 1 << 18;  // 1 MiB of floats: past the staging limit, so registered
constexpr std::size_t kBytes = kCount * sizeof(float);

void all_reduce_and_check(Communicator& comm, float* buf, float base, const char* what) {
  const int n = comm.size();
  for (std::size_t i = 0; i < kCount; ++i)
    buf[i] = base * static_cast<float>(comm.rank() + 1) + static_cast<float>(i % 7);
  comm.all_reduce(buf, buf, kCount, DataType::Float32, ReduceOp::Sum);
  const float ranks = static_cast<float>(n * (n + 1) / 2);
  for (std::size_t i = 0; i < kCount; i += 4093) {
    CHECK_EQ(buf[i], base * ranks + static_cast<float>(n) * static_cast<float>(i % 7)) << what << ", element " << i;
  }
}

// Two ranks over verbs: the same buffer used again, then its pages
// dropped, then the buffer unmapped and mapped again at its address.
void pages_change_between_operations(RankEnv& env, const char* tag) {
  CommOptions co;
  co.provider = "verbs";
  co.tag = tag;
  auto comm = Communicator::create(env.store_ptr(), env.rank(), env.world_size(), co);
  auto* buf = reinterpret_cast<float*>(map_anonymous(kBytes));
  all_reduce_and_check(*comm, buf, 1.0f, "first use");
  all_reduce_and_check(*comm, buf, 2.0f, "same buffer again");
  // Pages dropped and faulted back in as new zero pages (what free() of a
  // large chunk in a malloc arena does), then rewritten.
  CHECK_EQ(::madvise(buf, kBytes, MADV_DONTNEED), 0);
  all_reduce_and_check(*comm, buf, 3.0f, "after MADV_DONTNEED");
  // Unmapped, and new memory mapped at the same address.
  CHECK_EQ(::munmap(buf, kBytes), 0);
  buf = reinterpret_cast<float*>(map_anonymous(kBytes, buf));
  all_reduce_and_check(*comm, buf, 4.0f, "after munmap and mmap at the same address");
  ::munmap(buf, kBytes);
}

Options on_verbs() {
  Options options;
  options.provider = "verbs";
  return options;
}

TEST(VerbsCollectives, UserBuffersWhosePagesChangeBetweenOperations) {
  if (!has_rdma_device()) GTEST_SKIP() << "no RDMA device here (the soft-RoCE guest runs this)";
  ASSERT_TRUE(run_ranks(
      2, Placement::Local,
      [](RankEnv& env) {
        CHECK(unmap_detection().available) << unmap_detection().how;
        pages_change_between_operations(env, "watched");
      },
      on_verbs()));
}

// Where userfaultfd is refused (Docker's default seccomp profile), the
// cache cannot see unmaps and must not keep pinning registrations.
TEST(VerbsCollectives, WithoutUnmapWatchingRegistrationsLastOneOperation) {
  if (!has_rdma_device()) GTEST_SKIP() << "no RDMA device here (the soft-RoCE guest runs this)";
  ASSERT_TRUE(run_ranks(
      2, Placement::Local,
      [](RankEnv& env) {
        CHECK(deny_syscall(SYS_userfaultfd)) << std::strerror(errno);
        CHECK(!unmap_detection().available) << unmap_detection().how;
        pages_change_between_operations(env, "unwatched");
      },
      on_verbs()));
}

}  // namespace
}  // namespace rdmx::test
