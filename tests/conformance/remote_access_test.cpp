// SPDX-License-Identifier: MIT
// Remote access errors: wrong key, out of bounds, missing rights. Each gives
// REM_ACCESS_ERR at the initiator, moves the initiator's QP to ERROR and
// leaves every byte of the target untouched (checked by the target after).
#include <atomic>
#include <cstring>
#include <functional>

#include "conformance/conformance.hpp"

namespace rdmx::test {
namespace {

// The target owns a 16 KiB buffer filled with pattern kTargetSeed and
// registers [4096, 8192) of it with `access`: the bytes just outside the
// region are checked too.
constexpr std::size_t kTargetBuf = 16384;
constexpr std::size_t kRegionOffset = 4096;
constexpr std::size_t kRegionLen = 4096;
constexpr std::uint64_t kTargetSeed = 71;
constexpr std::uint64_t kLocalSeed = 72;
constexpr std::size_t kLocalBuf = 32u << 20;  // room for a "huge" 16 MiB request

struct Attack {
  // Builds the WR from the published region and a local region (pattern
  // kLocalSeed in its first 64 KiB). sges must outlive the returned WR.
  std::function<SendWr(const RemoteRegion&, const MemoryRegion& local, std::vector<Sge>& sges)> make;
  // Optional step that must succeed first on the same QP (proves the region works).
  std::function<void(QueuePair&, CompletionQueue&, const RemoteRegion&, const MemoryRegion& local)> before;
};

void remote_access_case(RankEnv& env, Access target_access, const Attack& attack) {
  Node node(env);
  if (env.rank() == kTarget) {
    Buffer target(kTargetBuf);
    fill_pattern(target.data(), target.size(), kTargetSeed);
    auto mr = node.pd->register_memory(target.data() + kRegionOffset, kRegionLen, target_access);
    auto qp = connected_qp(env, node, kInitiator, "t");
    publish_region(env, "region", *mr);
    await(env, "attack-done");
    CHECK_PATTERN(target.data(), target.size(), kTargetSeed, 0,
                  "target memory after a refused remote access (access rights " + to_string(target_access) + ")");
    env.barrier("done");
  } else {
    Buffer local(kLocalBuf);
    fill_pattern(local.data(), 65536, kLocalSeed);
    auto mr = node.pd->register_memory(local.data(), local.size(), Access::LocalWrite);
    auto qp = connected_qp(env, node, kTarget, "t");
    RemoteRegion region = fetch_region(env, "region");
    if (attack.before) attack.before(*qp, *node.send_cq, region, *mr);
    std::vector<Sge> sges;
    SendWr wr = attack.make(region, *mr, sges);
    wr.wr_id = 0xBAD;
    wr.signaled = true;
    qp->post_send(wr);
    auto wc = WAIT_WC(*node.send_cq, std::string("completion of the refused ") + to_string(wr.opcode));
    CHECK_WC(wc, std::string("refused ") + to_string(wr.opcode), .wr_id = 0xBAD, .status = WcStatus::RemAccessErr,
             .qp_num = qp->qp_num());
    CHECK(eventually([&] { return qp->state() == QpState::Error; }, default_timeout()))
        << "the initiator QP must move to ERROR after REM_ACCESS_ERR; state is " << to_string(qp->state());
    CHECK(!qp->error_reason().empty()) << "a QP in ERROR must say why";
    std::fprintf(stderr, "[rank %d] error_reason: %s\n", env.rank(), qp->error_reason().c_str());
    signal(env, "attack-done");
    env.barrier("done");
  }
}

SendWr one_sge(std::vector<Sge>& sges, Sge sge, Opcode op, std::uint64_t raddr, std::uint32_t rkey) {
  sges = {sge};
  return rdma_wr(0, op, sges, raddr, rkey);
}

SendWr atomic(std::vector<Sge>& sges, const MemoryRegion& local, Opcode op, std::uint64_t raddr, std::uint32_t rkey) {
  sges = {local.sge(65536, 8)};
  SendWr wr = rdma_wr(0, op, sges, raddr, rkey);
  wr.compare_add = 1;
  wr.swap = 2;
  return wr;
}

constexpr Access kRW = Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead;
constexpr Access kAll = Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead | Access::RemoteAtomic;

std::uint32_t wrong(std::uint32_t rkey) { return rkey ^ 0x5A5A5A5Au; }

// --- RDMA WRITE --------------------------------------------------------------

TEST_P(Conformance, WriteWithWrongRkey) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    remote_access_case(env, kRW, {.make = [](const RemoteRegion& r, const MemoryRegion& l, std::vector<Sge>& s) {
                         return one_sge(s, l.sge(0, 64), Opcode::RdmaWrite, r.addr, wrong(r.rkey));
                       }});
  }));
}

TEST_P(Conformance, WriteOneBytePastTheEnd) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    // [addr+1, addr+len+1): all in bounds but the last byte. Nothing may be written.
    remote_access_case(env, kRW, {.make = [](const RemoteRegion& r, const MemoryRegion& l, std::vector<Sge>& s) {
                         return one_sge(s, l.sge(0, static_cast<std::uint32_t>(r.length)), Opcode::RdmaWrite,
                                        r.addr + 1, r.rkey);
                       }});
  }));
}

TEST_P(Conformance, WriteStartingAtTheEnd) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    remote_access_case(env, kRW, {.make = [](const RemoteRegion& r, const MemoryRegion& l, std::vector<Sge>& s) {
                         return one_sge(s, l.sge(0, 1), Opcode::RdmaWrite, r.addr + r.length, r.rkey);
                       }});
  }));
}

TEST_P(Conformance, WriteOneByteBeforeTheStart) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    remote_access_case(env, kRW, {.make = [](const RemoteRegion& r, const MemoryRegion& l, std::vector<Sge>& s) {
                         return one_sge(s, l.sge(0, 8), Opcode::RdmaWrite, r.addr - 1, r.rkey);
                       }});
  }));
}

TEST_P(Conformance, WriteWithHugeLength) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    // 16 MiB into a 4 KiB region.
    remote_access_case(env, kRW, {.make = [](const RemoteRegion& r, const MemoryRegion& l, std::vector<Sge>& s) {
                         return one_sge(s, l.sge(0, 16u << 20), Opcode::RdmaWrite, r.addr, r.rkey);
                       }});
  }));
}

TEST_P(Conformance, WriteWithWrappingAddress) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    // remote_addr + length overflows 64 bits.
    remote_access_case(env, kRW, {.make = [](const RemoteRegion& r, const MemoryRegion& l, std::vector<Sge>& s) {
                         return one_sge(s, l.sge(0, 4096), Opcode::RdmaWrite, ~std::uint64_t{0} - 15, r.rkey);
                       }});
  }));
}

TEST_P(Conformance, WriteToReadOnlyRegion) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    remote_access_case(
        env, Access::RemoteRead,
        {.make = [](const RemoteRegion& r, const MemoryRegion& l,
                    std::vector<Sge>& s) { return one_sge(s, l.sge(0, 64), Opcode::RdmaWrite, r.addr, r.rkey); },
         .before =
             [](QueuePair& qp, CompletionQueue& cq, const RemoteRegion& r, const MemoryRegion& l) {
               // The region is reachable: READ works.
               auto wc = RDMA_SYNC(qp, cq, Opcode::RdmaRead, l.sge(1 << 20, 64), r.addr, r.rkey, 1);
               CHECK_EQ(wc.status, WcStatus::Success) << "READ from the read-only region: " << describe(wc);
               CHECK_PATTERN(static_cast<std::uint8_t*>(l.addr()) + (1 << 20), 64, kTargetSeed, kRegionOffset,
                             "READ from the read-only region");
             }});
  }));
}

// --- RDMA READ ---------------------------------------------------------------

TEST_P(Conformance, ReadWithoutRemoteRead) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    remote_access_case(
        env, Access::LocalWrite | Access::RemoteWrite,
        {.make = [](const RemoteRegion& r, const MemoryRegion& l,
                    std::vector<Sge>& s) { return one_sge(s, l.sge(1 << 20, 64), Opcode::RdmaRead, r.addr, r.rkey); },
         .before =
             [](QueuePair& qp, CompletionQueue& cq, const RemoteRegion& r, const MemoryRegion& l) {
               // The region is reachable: WRITE works (writes the target's own pattern back, so nothing changes).
               fill_pattern(static_cast<std::uint8_t*>(l.addr()) + (2 << 20), 64, kTargetSeed, kRegionOffset);
               auto wc = RDMA_SYNC(qp, cq, Opcode::RdmaWrite, l.sge(2 << 20, 64), r.addr, r.rkey, 1);
               CHECK_EQ(wc.status, WcStatus::Success) << "WRITE to the write-only region: " << describe(wc);
             }});
  }));
}

TEST_P(Conformance, ReadWithWrongRkey) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    remote_access_case(env, kRW, {.make = [](const RemoteRegion& r, const MemoryRegion& l, std::vector<Sge>& s) {
                         return one_sge(s, l.sge(1 << 20, 64), Opcode::RdmaRead, r.addr, wrong(r.rkey));
                       }});
  }));
}

TEST_P(Conformance, ReadOneBytePastTheEnd) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    remote_access_case(env, kRW, {.make = [](const RemoteRegion& r, const MemoryRegion& l, std::vector<Sge>& s) {
                         return one_sge(s, l.sge(1 << 20, static_cast<std::uint32_t>(r.length)), Opcode::RdmaRead,
                                        r.addr + 1, r.rkey);
                       }});
  }));
}

TEST_P(Conformance, ReadWithHugeLength) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    remote_access_case(env, kRW, {.make = [](const RemoteRegion& r, const MemoryRegion& l, std::vector<Sge>& s) {
                         return one_sge(s, l.sge(1 << 20, 16u << 20), Opcode::RdmaRead, r.addr, r.rkey);
                       }});
  }));
}

// --- Atomics -----------------------------------------------------------------

TEST_P(Conformance, FetchAddWithoutRemoteAtomic) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    remote_access_case(env, kRW, {.make = [](const RemoteRegion& r, const MemoryRegion& l, std::vector<Sge>& s) {
                         return atomic(s, l, Opcode::AtomicFetchAdd, r.addr + 8, r.rkey);
                       }});
  }));
}

TEST_P(Conformance, CmpSwapWithoutRemoteAtomic) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    remote_access_case(env, kRW, {.make = [](const RemoteRegion& r, const MemoryRegion& l, std::vector<Sge>& s) {
                         return atomic(s, l, Opcode::AtomicCmpSwap, r.addr + 8, r.rkey);
                       }});
  }));
}

TEST_P(Conformance, AtomicWithWrongRkey) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    remote_access_case(env, kAll, {.make = [](const RemoteRegion& r, const MemoryRegion& l, std::vector<Sge>& s) {
                         return atomic(s, l, Opcode::AtomicFetchAdd, r.addr + 8, wrong(r.rkey));
                       }});
  }));
}

TEST_P(Conformance, AtomicPastTheEnd) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    // The 8-byte word right after the region (aligned, so only the bounds are wrong).
    remote_access_case(env, kAll, {.make = [](const RemoteRegion& r, const MemoryRegion& l, std::vector<Sge>& s) {
                         return atomic(s, l, Opcode::AtomicCmpSwap, r.addr + r.length, r.rkey);
                       }});
  }));
}

// Misaligned atomics are refused when posted (verbs.hpp: "unaligned atomic"
// is InvalidArgument), and the QP keeps working.
TEST_P(Conformance, MisalignedAtomicIsRefusedAtPost) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    Node node(env);
    if (env.rank() == kTarget) {
      Buffer target(4096);
      target.store64(8, 10);
      auto mr = node.pd->register_memory(target.data(), target.size(), Access::LocalWrite | Access::RemoteAtomic);
      auto qp = connected_qp(env, node, kInitiator, "t");
      publish_region(env, "region", *mr);
      env.barrier("done");
      CHECK_EQ(target.load64(8), 11u) << "only the one valid fetch-add may have run";
      CHECK_EQ(target.load64(0), 0u);
      CHECK_EQ(target.load64(16), 0u);
    } else {
      Buffer local(4096);
      auto mr = node.pd->register_memory(local.data(), local.size(), Access::LocalWrite);
      auto qp = connected_qp(env, node, kTarget, "t");
      RemoteRegion r = fetch_region(env, "region");
      for (std::uint64_t misalign : {1, 4, 7}) {
        for (Opcode op : {Opcode::AtomicFetchAdd, Opcode::AtomicCmpSwap}) {
          Sge sge = mr->sge(0, 8);
          SendWr wr = rdma_wr(1, op, {&sge, 1}, r.addr + 8 + misalign, r.rkey);
          wr.compare_add = 1;
          auto err = EXPECT_RDMX_ERROR(ErrorCode::InvalidArgument, qp->post_send(wr));
          CHECK(!err.message().empty());
        }
      }
      // Local result SGE of the wrong size, or misaligned.
      Sge four = mr->sge(0, 4);
      EXPECT_RDMX_ERROR(ErrorCode::InvalidArgument,
                        qp->post_send(rdma_wr(2, Opcode::AtomicFetchAdd, {&four, 1}, r.addr + 8, r.rkey)));
      Sge sixteen = mr->sge(0, 16);
      EXPECT_RDMX_ERROR(ErrorCode::InvalidArgument,
                        qp->post_send(rdma_wr(3, Opcode::AtomicFetchAdd, {&sixteen, 1}, r.addr + 8, r.rkey)));
      CHECK_EQ(qp->state(), QpState::Rts) << "a refused post must not change the QP state";
      CHECK_NO_WC(*node.send_cq, "after refused posts");
      auto wc = ATOMIC_SYNC(*qp, *node.send_cq, Opcode::AtomicFetchAdd, mr->sge(64, 8), r.addr + 8, r.rkey, 1, 0, 4);
      CHECK_WC(wc, "valid fetch-add after refused posts", .wr_id = 4, .status = WcStatus::Success,
               .opcode = WcOpcode::FetchAdd, .byte_len = 8);
      CHECK_EQ(local.load64(64), 10u);
      env.barrier("done");
    }
  }));
}

}  // namespace
}  // namespace rdmx::test
