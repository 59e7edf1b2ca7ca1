// SPDX-License-Identifier: MIT
// Atomics from several processes at once on one word of rank 0's memory.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "conformance/conformance.hpp"

namespace rdmx::test {
namespace {

// Ranks 1..3 each run kOps FETCH_AND_ADD(1) on one counter (16 in flight per
// rank): the total is exact and the returned old values are exactly
// 0 .. 3*kOps-1, each once.
TEST_P(Conformance, FetchAddFromThreeProcesses) {
  ASSERT_TRUE(run(4, [](RankEnv& env) {
    constexpr int kOps = 1000;
    constexpr int kWindow = 16;
    const int adders = env.world_size() - 1;
    Node node(env);
    if (env.rank() == 0) {
      Buffer counter(4096);
      auto mr = node.pd->register_memory(counter.data(), counter.size(), Access::LocalWrite | Access::RemoteAtomic);
      std::vector<std::unique_ptr<QueuePair>> qps;
      for (int peer = 1; peer <= adders; ++peer) qps.push_back(connected_qp(env, node, peer, "fa"));
      publish_region(env, "counter", RemoteRegion{counter.addr(64), mr->rkey(), 8});
      std::vector<std::uint64_t> olds;
      for (int peer = 1; peer <= adders; ++peer) {
        Bytes bytes = env.store().get("olds/" + std::to_string(peer));
        CHECK_EQ(bytes.size(), sizeof(std::uint64_t) * kOps) << "old values from rank " << peer;
        std::size_t base = olds.size();
        olds.resize(base + kOps);
        std::memcpy(olds.data() + base, bytes.data(), bytes.size());
      }
      std::uint64_t total = counter.load64(64);
      CHECK_EQ(total, static_cast<std::uint64_t>(adders) * kOps) << "final counter";
      std::sort(olds.begin(), olds.end());
      for (std::size_t i = 0; i < olds.size(); ++i) {
        if (olds[i] != i) {
          FAIL_RANK() << "returned old values are not 0.." << olds.size() - 1 << " each once: sorted position " << i
                      << " holds " << olds[i] << (i > 0 && olds[i] == olds[i - 1] ? " (duplicate)" : " (gap)");
        }
      }
      env.barrier("done");
    } else {
      Buffer results(8 * kWindow);
      auto mr = node.pd->register_memory(results.data(), results.size(), Access::LocalWrite);
      auto qp = connected_qp(env, node, 0, "fa");
      RemoteRegion counter = fetch_region(env, "counter");
      std::vector<std::uint64_t> olds(kOps);
      auto post = [&](int op) {
        Sge sge = mr->sge(8 * static_cast<std::size_t>(op % kWindow), 8);
        SendWr wr =
            rdma_wr(static_cast<std::uint64_t>(op), Opcode::AtomicFetchAdd, {&sge, 1}, counter.addr, counter.rkey);
        wr.compare_add = 1;
        qp->post_send(wr);
      };
      int posted = 0;
      for (; posted < kWindow; ++posted) post(posted);
      for (int done = 0; done < kOps; ++done) {
        auto wc = WAIT_WC(*node.send_cq, "fetch-add #" + std::to_string(done));
        CHECK_WC(wc, "fetch-add", .wr_id = static_cast<std::uint64_t>(done), .status = WcStatus::Success,
                 .opcode = WcOpcode::FetchAdd, .byte_len = 8);
        olds[static_cast<std::size_t>(done)] = results.load64(8 * static_cast<std::size_t>(done % kWindow));
        if (posted < kOps) post(posted++);
      }
      Bytes bytes(sizeof(std::uint64_t) * kOps);
      std::memcpy(bytes.data(), olds.data(), bytes.size());
      env.store().set("olds/" + std::to_string(env.rank()), bytes);
      env.barrier("done");
    }
  }));
}

// A spin lock taken with COMPARE_AND_SWAP (0 -> rank) protects a plain
// counter that ranks 1..3 update with RDMA READ, +1, RDMA WRITE.
TEST_P(Conformance, CmpSwapLockProtectsReadModifyWrite) {
  ASSERT_TRUE(run(4, [](RankEnv& env) {
    constexpr int kIters = 150;
    const int workers = env.world_size() - 1;
    Node node(env);
    if (env.rank() == 0) {
      Buffer mem(4096);  // lock at 0, counter at 64
      auto mr = node.pd->register_memory(
          mem.data(), mem.size(), Access::LocalWrite | Access::RemoteAtomic | Access::RemoteRead | Access::RemoteWrite);
      std::vector<std::unique_ptr<QueuePair>> qps;
      for (int peer = 1; peer <= workers; ++peer) qps.push_back(connected_qp(env, node, peer, "lock"));
      publish_region(env, "mem", *mr);
      env.barrier("done");
      CHECK_EQ(mem.load64(0), 0u) << "lock word at the end";
      CHECK_EQ(mem.load64(64), static_cast<std::uint64_t>(workers) * kIters) << "counter updated under the lock";
    } else {
      Buffer local(4096);  // CAS result at 0, counter copy at 64
      auto mr = node.pd->register_memory(local.data(), local.size(), Access::LocalWrite);
      auto qp = connected_qp(env, node, 0, "lock");
      RemoteRegion mem = fetch_region(env, "mem");
      const auto me = static_cast<std::uint64_t>(env.rank());
      const auto deadline = std::chrono::steady_clock::now() + default_timeout();
      std::uint64_t id = 0;
      std::uint64_t spins = 0;
      for (int it = 0; it < kIters; ++it) {
        for (;;) {  // acquire
          auto wc =
              ATOMIC_SYNC(*qp, *node.send_cq, Opcode::AtomicCmpSwap, mr->sge(0, 8), mem.addr, mem.rkey, 0, me, ++id);
          CHECK_EQ(wc.status, WcStatus::Success) << describe(wc);
          std::uint64_t old = local.load64(0);
          if (old == 0) break;
          CHECK(old >= 1 && old <= static_cast<std::uint64_t>(workers)) << "lock word holds " << old;
          CHECK(old != me) << "lock held by myself while I am not holding it";
          ++spins;
          CHECK(std::chrono::steady_clock::now() < deadline) << "could not take the lock (iteration " << it << ")";
        }
        auto rd = RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaRead, mr->sge(64, 8), mem.addr + 64, mem.rkey, ++id);
        CHECK_EQ(rd.status, WcStatus::Success) << describe(rd);
        local.store64(64, local.load64(64) + 1);
        auto wr = RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, mr->sge(64, 8), mem.addr + 64, mem.rkey, ++id);
        CHECK_EQ(wr.status, WcStatus::Success) << describe(wr);
        auto rel =
            ATOMIC_SYNC(*qp, *node.send_cq, Opcode::AtomicCmpSwap, mr->sge(0, 8), mem.addr, mem.rkey, me, 0, ++id);
        CHECK_EQ(rel.status, WcStatus::Success) << describe(rel);
        CHECK_EQ(local.load64(0), me) << "releasing: the lock was not held by me";
      }
      std::fprintf(stderr, "[rank %d] %d lock iterations, %llu failed acquisition attempts\n", env.rank(), kIters,
                   static_cast<unsigned long long>(spins));
      env.barrier("done");
    }
  }));
}

}  // namespace
}  // namespace rdmx::test
