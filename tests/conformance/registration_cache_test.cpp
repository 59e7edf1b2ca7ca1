// SPDX-License-Identifier: MIT
// RegistrationCache on every provider: asking again for a registered buffer
// registers nothing, and after the buffer's memory is unmapped and other
// memory is mapped at the same address, a peer's WRITE through the key the
// cache hands out lands in the new memory (on a NIC that pins pages, a
// stale registration would put it in the old pages, unseen; a software
// provider's would refuse it).
#include <sys/mman.h>

#include "conformance/conformance.hpp"
#include "rdmx/registration_cache.hpp"

namespace rdmx::test {
namespace {

constexpr std::size_t kCacheLen = 256 * 1024;

TEST_P(HostMemoryConformance, RegistrationCacheReusesAndFollowsUnmap) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    Node node(env);
    if (env.rank() == kTarget) {
      const DeviceCaps caps = node.device->caps();
      const bool watched = unmap_detection().available;
      RegistrationCache cache(*node.pd, caps);
      const Access rights = Access::LocalWrite | Access::RemoteWrite;
      char* buf = map_anonymous(kCacheLen);

      MemoryRegion& first = cache.get(buf, kCacheLen, rights);
      MemoryRegion& again = cache.get(buf, kCacheLen, rights);
      MemoryRegion& part = cache.get(buf + 4096, 8192, Access::LocalWrite);
      CHECK_EQ(&again, &first) << "the same buffer again is a hit";
      CHECK_EQ(&part, &first) << "a part of it with fewer rights is a hit";
      CHECK_EQ(cache.stats().hits, 2u);
      CHECK_EQ(cache.stats().misses, 1u);
      CHECK_EQ(again.rkey(), first.rkey());

      auto qp = connected_qp(env, node, kInitiator, "t");
      publish_region(env, "first", first);
      await(env, "wrote-first");
      CHECK_PATTERN(buf, 4096, 31, 0, "WRITE through the cached registration");

      // The application frees the buffer and gets new memory at its address.
      CHECK_EQ(::munmap(buf, kCacheLen), 0);
      char* same = map_anonymous(kCacheLen, buf);
      cache.forget_unwatched();  // what a collective does as it starts
      MemoryRegion& now = cache.get(same, kCacheLen, rights);
      const auto s = cache.stats();
      if (watched) {
        // A kept registration would hold the old pages (pinning) or refuse
        // every access (software providers): either way, registered anew.
        CHECK_EQ(s.unmapped, 1u) << "the unmap was seen";
        CHECK_EQ(s.misses, 2u);
      } else if (!caps.registration_pins_memory) {
        CHECK_EQ(s.hits, 3u) << "unwatched registration without pinning follows the address: kept";
      } else {
        CHECK_EQ(s.unwatched, 1u) << "unwatched pinning registrations are dropped";
        CHECK_EQ(s.misses, 2u);
      }
      publish_region(env, "now", now);
      await(env, "wrote-now");
      CHECK_PATTERN(same, 4096, 32, 0, "WRITE after the memory was replaced lands in the new memory");
      env.barrier("done");
      ::munmap(same, kCacheLen);
    } else {
      Buffer src(8192);
      fill_pattern(src.data(), 4096, 31);
      fill_pattern(src.data() + 4096, 4096, 32);
      auto mr = node.pd->register_memory(src.data(), src.size(), Access::LocalWrite);
      auto qp = connected_qp(env, node, kTarget, "t");
      RemoteRegion first = fetch_region(env, "first");
      auto one = RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, mr->sge(0, 4096), first.addr, first.rkey, 1);
      CHECK_WC(one, "WRITE through the cached registration", .wr_id = 1, .status = WcStatus::Success);
      signal(env, "wrote-first");
      RemoteRegion now = fetch_region(env, "now");
      auto two = RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, mr->sge(4096, 4096), now.addr, now.rkey, 2);
      CHECK_WC(two, "WRITE through the registration after the memory was replaced", .wr_id = 2,
               .status = WcStatus::Success);
      signal(env, "wrote-now");
      env.barrier("done");
    }
  }));
}

}  // namespace
}  // namespace rdmx::test
