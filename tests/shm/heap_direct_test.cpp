// SPDX-License-Identifier: MIT
// shm's WRITEs and READs into a peer's registered heap memory, once the
// peer has offered the region, are copied by the initiator across processes
// (process_vm_writev/readv): they complete while the target process is
// stopped, they stop at the region's deregistration, and the initiator
// unmaps what the target deregistered.
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <string>

#include "support/harness.hpp"
#include "support/verbs_util.hpp"

namespace rdmx::test {
namespace {

constexpr int kTarget = 0;
constexpr int kInitiator = 1;
constexpr std::size_t kHeapLen = 1 << 20;
constexpr int kChurn = 40;

// State pages of a peer's heap regions mapped in this process.
int heap_pages_mapped() { return mappings_of("rdmx-heap-region"); }

TEST(ShmProvider, HeapWritesAndReadsNeedNoTargetThread) {
  Options options;
  options.provider = "shm";
  ASSERT_TRUE(run_ranks(
      2, Placement::Local,
      [](RankEnv& env) {
        Node node(env);
        if (env.rank() == kTarget) {
          Buffer buf(kHeapLen);
          set_bytes(buf.data(), 0, kHeapLen / 2);
          fill_pattern(buf.data() + kHeapLen / 2, kHeapLen / 2, 11);
          auto mr = node.pd->register_memory(buf.data(), kHeapLen,
                                             Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead);
          auto qp = connected_qp(env, node, kInitiator, "h");
          auto churn_qp = connected_qp(env, node, kInitiator, "c");
          publish_region(env, "heap", *mr);
          signal(env, "pid", std::to_string(::getpid()));
          await(env, "written");  // stopped and continued by the initiator meanwhile
          CHECK_PATTERN(buf.data(), kHeapLen / 2, 12, 0, "a WRITE placed while this process was stopped");
          mr.reset();
          signal(env, "deregistered");
          for (int i = 0; i < kChurn; ++i) {
            Buffer one(4096);
            set_bytes(one.data(), 0, 4096);
            auto m = node.pd->register_memory(one.data(), 4096, Access::LocalWrite | Access::RemoteWrite);
            publish_region(env, "churn/" + std::to_string(i), *m);
            await(env, "churned/" + std::to_string(i));
            CHECK_PATTERN(one.data(), 64, 12, 0, "WRITEs into a short-lived region");
          }
          env.barrier("done");
          return;
        }
        Buffer src(kHeapLen);
        fill_pattern(src.data(), kHeapLen / 2, 12);
        set_bytes(src.data() + kHeapLen / 2, 0, kHeapLen / 2);
        auto src_mr = node.pd->register_memory(src.data(), kHeapLen, Access::LocalWrite);
        auto qp = connected_qp(env, node, kTarget, "h");
        // The access error below moves `qp` to ERROR, so the churn has its own.
        auto churn_qp = connected_qp(env, node, kTarget, "c");
        RemoteRegion heap = fetch_region(env, "heap");
        const auto pid = static_cast<pid_t>(std::stol(await(env, "pid")));
        // The first WRITE takes the ring; the target offers the region then.
        CHECK_WC(RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, src_mr->sge(0, 64), heap.addr, heap.rkey, 1),
                 "first WRITE into the heap region", .wr_id = 1);
        CHECK(eventually([&] { return heap_pages_mapped() == 1; }, std::chrono::seconds(20)))
            << "the target never offered its heap region";
        {
          StoppedProcess stopped(pid);
          CHECK_WC(
              RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, src_mr->sge(0, kHeapLen / 2), heap.addr, heap.rkey, 2),
              "WRITE into a stopped target's heap", .wr_id = 2);
          CHECK_WC(RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaRead, src_mr->sge(kHeapLen / 2, kHeapLen / 2),
                             heap.addr + kHeapLen / 2, heap.rkey, 3),
                   "READ from a stopped target's heap", .wr_id = 3);
        }
        CHECK_PATTERN(src.data() + kHeapLen / 2, kHeapLen / 2, 11, 0, "a READ from a stopped target's heap");
        signal(env, "written");
        await(env, "deregistered");
        CHECK_WC(RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, src_mr->sge(0, 8), heap.addr, heap.rkey, 4),
                 "WRITE into a deregistered heap region", .wr_id = 4, .status = WcStatus::RemAccessErr);
        for (int i = 0; i < kChurn; ++i) {
          RemoteRegion one = fetch_region(env, "churn/" + std::to_string(i));
          for (std::uint64_t k = 0; k < 2; ++k) {
            CHECK_WC(
                RDMA_SYNC(*churn_qp, *node.send_cq, Opcode::RdmaWrite, src_mr->sge(0, 64), one.addr, one.rkey, 10 + k),
                "WRITE into a short-lived region", .wr_id = 10 + k);
          }
          signal(env, "churned/" + std::to_string(i));
        }
        // Each offer drops the regions the target deregistered before it.
        CHECK_LE(heap_pages_mapped(), 1) << "state pages of deregistered regions stay mapped";
        env.barrier("done");
      },
      options));
}

// Shared segments of shm QPs mapped in this process.
int qp_segments_mapped() { return mappings_of("rdmx-shm-qp"); }

// The first WRITE into a region reaches the target in the same pass as the
// writer's ACCEPT when the target stands still while the writer accepts: the
// target (as the handshake's initiator, whose rings are read before its
// sockets) must still offer the region. Each rank is the target once, so one
// of the two rounds has the target initiate, whichever side that is.
TEST(ShmProvider, AHeapRegionWrittenBeforeTheAcceptIsReadIsOffered) {
  Options options;
  options.provider = "shm";
  ASSERT_TRUE(run_ranks(
      2, Placement::Local,
      [](RankEnv& env) {
        Node node(env);
        for (int target = 0; target < 2; ++target) {
          const int writer = 1 - target;
          const std::string round = "round" + std::to_string(target);
          auto qp = make_qp(node);
          if (env.rank() == target) {
            Buffer buf(4096);
            set_bytes(buf.data(), 0, 4096);
            auto mr = node.pd->register_memory(buf.data(), 4096, Access::LocalWrite | Access::RemoteWrite);
            publish_region(env, round + "/heap", *mr);
            connect_qp(env, *qp, writer, round);
            signal(env, round + "/connected", std::to_string(::getpid()));
            await(env, round + "/written");  // stopped and continued by the writer meanwhile
            CHECK_PATTERN(buf.data(), 64, 12, 0, "a WRITE whose record came before the ACCEPT was read");
            env.barrier(round);
            continue;
          }
          Buffer src(4096);
          fill_pattern(src.data(), 64, 12);
          auto src_mr = node.pd->register_memory(src.data(), 4096, Access::LocalWrite);
          const std::string me = std::to_string(env.rank());
          const std::string them = std::to_string(target);
          env.store().set(round + "/qp/" + me + "->" + them, std::string_view(qp->local_address().to_hex()));
          RemoteRegion heap = fetch_region(env, round + "/heap");
          const auto pid = static_cast<pid_t>(std::stol(await(env, round + "/connected")));
          const int segments = qp_segments_mapped();
          {
            StoppedProcess stopped(pid);
            ConnectOptions connect;
            connect.peer_rank = target;
            qp->connect(QpAddress::from_hex(env.store().get_string(round + "/qp/" + them + "->" + me)), connect);
            // Mapped at accept, whose ACCEPT and pump (which a posted WR waits for) follow under one lock.
            CHECK(eventually([&] { return qp_segments_mapped() > segments; }, std::chrono::seconds(20)))
                << "the connection's segment was never mapped here";
            const Sge sge = src_mr->sge(0, 64);
            qp->post_send(rdma_wr(1, Opcode::RdmaWrite, std::span(&sge, 1), heap.addr, heap.rkey));
          }
          CHECK_WC(WAIT_WC(*node.send_cq, "first WRITE into a heap region"), "first WRITE into a heap region",
                   .wr_id = 1);
          CHECK(eventually([&] { return heap_pages_mapped() == 1; }, std::chrono::seconds(20)))
              << round << ": the target never offered its heap region";
          signal(env, round + "/written");
          env.barrier(round);
        }
      },
      options));
}

}  // namespace
}  // namespace rdmx::test
