// SPDX-License-Identifier: MIT
// Regions from ProtectionDomain::allocate_memory(): the same verbs semantics
// as registered heap memory on every provider, including when a provider
// lets the peer copy into them directly (shm maps them in the peer).
#include <cstring>

#include "conformance/conformance.hpp"

namespace rdmx::test {
namespace {

constexpr std::size_t kBig = 1 << 20;

TEST_P(HostMemoryConformance, AllocatedMemoryWriteReadAndDeregistration) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    Node node(env);
    if (env.rank() == kTarget) {
      auto a = node.pd->allocate_memory(kBig, Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead);
      auto b = node.pd->allocate_memory(4096, Access::LocalWrite | Access::RemoteWrite);
      auto ro = node.pd->allocate_memory(4096, Access::RemoteRead);
      CHECK_EQ(a->length(), kBig);
      CHECK_BYTES(a->addr(), kBig, 0, "allocated memory must be zeroed");
      auto* bytes = static_cast<std::uint8_t*>(a->addr());
      fill_pattern(bytes + kBig / 2, kBig / 2, 301);
      auto qp = connected_qp(env, node, kInitiator, "t");
      publish_region(env, "a", *a);
      publish_region(env, "b", *b);
      publish_region(env, "ro", *ro);
      await(env, "written");
      CHECK_PATTERN(bytes, 64 * 100, 302, 0, "100 WRITEs into an allocated region");
      CHECK_BYTES(ro->addr(), 4096, 0, "a read-only allocated region after WRITEs to it");
      b.reset();  // deregister while the peer has used (and may have mapped) it
      signal(env, "deregistered");
      env.barrier("done");
    } else {
      auto local = node.pd->allocate_memory(kBig, Access::LocalWrite);
      auto* bytes = static_cast<std::uint8_t*>(local->addr());
      fill_pattern(bytes, 64 * 100, 302);
      auto qp = connected_qp(env, node, kTarget, "t");
      RemoteRegion a = fetch_region(env, "a");
      RemoteRegion b = fetch_region(env, "b");
      RemoteRegion ro = fetch_region(env, "ro");
      for (int i = 0; i < 100; ++i) {
        auto wc = RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, local->sge(64 * i, 64), a.addr + 64 * i, a.rkey,
                            static_cast<std::uint64_t>(i));
        CHECK_WC(wc, "WRITE into an allocated region", .wr_id = static_cast<std::uint64_t>(i),
                 .status = WcStatus::Success);
        CHECK_WC(RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, local->sge(0, 8), b.addr, b.rkey, 1000),
                 "WRITE into the region deregistered later", .wr_id = 1000, .status = WcStatus::Success);
      }
      for (int i = 0; i < 10; ++i) {
        set_bytes(bytes + kBig / 2, 0, kBig / 2);
        auto rd = RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaRead, local->sge(kBig / 2, kBig / 2), a.addr + kBig / 2,
                            a.rkey, 200);
        CHECK_WC(rd, "READ from an allocated region", .wr_id = 200, .status = WcStatus::Success);
        CHECK_PATTERN(bytes + kBig / 2, kBig / 2, 301, 0, "READ from an allocated region");
      }
      signal(env, "written");
      await(env, "deregistered");
      auto stale = RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, local->sge(0, 8), b.addr, b.rkey, 2);
      CHECK_WC(stale, "WRITE into a deregistered allocated region", .wr_id = 2, .status = WcStatus::RemAccessErr);
      env.barrier("done");
      (void)ro;
    }
  }));
}

// A peer's WRITE rings the region's write doorbell once it has landed, on
// every path a provider places WRITEs by (small and streamed tcp frames,
// shm's ring before the region is mapped and its direct copies after): the
// target only sleeps on the doorbell, so a WRITE that rings nothing fails
// the round at its deadline, and data missing when it rings fails the check.
TEST_P(HostMemoryConformance, AllocatedMemoryWriteRingsItsDoorbell) {
  constexpr int kRounds = 24;
  constexpr std::size_t kSizes[] = {8, 4000, 256 * 1024};
  ASSERT_TRUE(run(2, [&](RankEnv& env) {
    Node node(env);
    const bool rings = node.device->caps().writes_wake_waiters;
    if (env.rank() == kTarget) {
      auto a = node.pd->allocate_memory(kBig, Access::LocalWrite | Access::RemoteWrite);
      auto b = node.pd->allocate_memory(4096, Access::LocalWrite | Access::RemoteWrite);
      const Doorbell* bell = a->write_doorbell();
      auto qp = connected_qp(env, node, kInitiator, "t");
      publish_region(env, "a", *a);
      publish_region(env, "b", *b);
      if (!rings) {
        CHECK(bell == nullptr) << "a device without writes_wake_waiters offers a write doorbell";
        env.barrier("done");
        return;
      }
      CHECK(bell != nullptr) << "writes_wake_waiters, but an allocated region has no write doorbell";
      CHECK(b->write_doorbell() != bell);
      auto* bytes = static_cast<std::uint8_t*>(a->addr());
      for (int r = 0; r < kRounds; ++r) {
        const std::size_t len = kSizes[r % 3];
        const std::uint32_t seen = bell->epoch();
        signal(env, "armed/" + std::to_string(r));
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (bell->epoch() == seen && std::chrono::steady_clock::now() < deadline) bell->block(seen, deadline);
        CHECK_NE(bell->epoch(), seen) << "round " << r << ": a " << len << "-byte WRITE did not ring within 20 s";
        CHECK_PATTERN(bytes, len, 400 + r, 0, "a WRITE's bytes when its doorbell rings");
        signal(env, "checked/" + std::to_string(r));
      }
      env.barrier("done");
    } else {
      auto local = node.pd->allocate_memory(kBig, Access::LocalWrite);
      auto* bytes = static_cast<std::uint8_t*>(local->addr());
      auto qp = connected_qp(env, node, kTarget, "t");
      RemoteRegion a = fetch_region(env, "a");
      RemoteRegion b = fetch_region(env, "b");
      for (int r = 0; rings && r < kRounds; ++r) {
        const std::size_t len = kSizes[r % 3];
        fill_pattern(bytes, len, 400 + r);
        await(env, "armed/" + std::to_string(r));
        // A WRITE into another region first: it must not ring this one.
        CHECK_WC(RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, local->sge(0, 8), b.addr, b.rkey, 1),
                 "WRITE into the other region", .wr_id = 1, .status = WcStatus::Success);
        CHECK_WC(RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, local->sge(0, static_cast<std::uint32_t>(len)),
                           a.addr, a.rkey, 2),
                 "WRITE into the region waited on", .wr_id = 2, .status = WcStatus::Success);
        await(env, "checked/" + std::to_string(r));
      }
      env.barrier("done");
    }
  }));
}

// Rights and bounds hold for allocated regions as for any other, also on a
// QP that has been using the region (and may have it mapped).
TEST_P(HostMemoryConformance, AllocatedMemoryRightsAndBounds) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    Node node(env);
    if (env.rank() == kTarget) {
      auto ro = node.pd->allocate_memory(4096, Access::RemoteRead);
      fill_pattern(ro->addr(), 4096, 303);
      auto q1 = connected_qp(env, node, kInitiator, "1");
      auto q2 = connected_qp(env, node, kInitiator, "2");
      publish_region(env, "ro", *ro);
      await(env, "attacked");
      CHECK_PATTERN(ro->addr(), 4096, 303, 0, "a read-only allocated region after WRITE and out-of-bounds READ");
      env.barrier("done");
    } else {
      auto local = node.pd->allocate_memory(8192, Access::LocalWrite);
      auto q1 = connected_qp(env, node, kTarget, "1");
      auto q2 = connected_qp(env, node, kTarget, "2");
      RemoteRegion ro = fetch_region(env, "ro");
      for (int i = 0; i < 50; ++i) {
        CHECK_WC(RDMA_SYNC(*q1, *node.send_cq, Opcode::RdmaRead, local->sge(0, 4096), ro.addr, ro.rkey, 1),
                 "READ of a read-only allocated region", .wr_id = 1, .status = WcStatus::Success);
      }
      CHECK_PATTERN(local->addr(), 4096, 303, 0, "READ of a read-only allocated region");
      CHECK_WC(RDMA_SYNC(*q1, *node.send_cq, Opcode::RdmaRead, local->sge(0, 4096), ro.addr + 1, ro.rkey, 2),
               "READ one byte past the end of an allocated region", .wr_id = 2, .status = WcStatus::RemAccessErr);
      CHECK_WC(RDMA_SYNC(*q2, *node.send_cq, Opcode::RdmaWrite, local->sge(0, 64), ro.addr, ro.rkey, 3),
               "WRITE into a read-only allocated region", .wr_id = 3, .status = WcStatus::RemAccessErr);
      signal(env, "attacked");
      env.barrier("done");
    }
  }));
}

}  // namespace
}  // namespace rdmx::test
