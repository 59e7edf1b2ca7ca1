// SPDX-License-Identifier: MIT
// Two QPs of one device in one process: the quickest check that the verbs
// path works end to end (the conformance suite repeats everything across
// real processes and hosts).
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "rdmx/verbs.hpp"

namespace {

using namespace rdmx;

struct Pair {
  std::shared_ptr<Device> dev = open_device("tcp");
  std::unique_ptr<ProtectionDomain> pd = dev->alloc_pd();
  std::unique_ptr<CompletionQueue> cq_a = dev->create_cq(64);
  std::unique_ptr<CompletionQueue> cq_b = dev->create_cq(64);
  std::unique_ptr<QueuePair> a = dev->create_qp(*pd, *cq_a, *cq_a);
  std::unique_ptr<QueuePair> b = dev->create_qp(*pd, *cq_b, *cq_b);
  Pair() {
    a->connect(b->local_address());
    b->connect(a->local_address());
  }
  static WorkCompletion one(CompletionQueue& cq) {
    WorkCompletion wc;
    EXPECT_EQ(cq.wait({&wc, 1}, std::chrono::seconds(10)), 1u);
    return wc;
  }
};

TEST(InProcess, WriteThenRead) {
  Pair p;
  std::vector<std::uint8_t> src(1 << 20), dst(1 << 20, 0), back(1 << 20, 0);
  std::iota(src.begin(), src.end(), 0);
  auto src_mr = p.pd->register_memory(src.data(), src.size(), Access::LocalWrite);
  auto dst_mr =
      p.pd->register_memory(dst.data(), dst.size(), Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead);
  auto back_mr = p.pd->register_memory(back.data(), back.size(), Access::LocalWrite);
  Sge sge = src_mr->sge(0, static_cast<std::uint32_t>(src.size()));
  SendWr wr{.wr_id = 7,
            .opcode = Opcode::RdmaWrite,
            .sg_list = {&sge, 1},
            .remote_addr = reinterpret_cast<std::uint64_t>(dst.data()),
            .rkey = dst_mr->rkey()};
  p.a->post_send(wr);
  auto wc = Pair::one(*p.cq_a);
  EXPECT_EQ(wc.status, WcStatus::Success) << to_string(wc.status);
  EXPECT_EQ(wc.wr_id, 7u);
  EXPECT_EQ(wc.opcode, WcOpcode::RdmaWrite);
  EXPECT_EQ(src, dst);

  Sge back_sge = back_mr->sge(0, static_cast<std::uint32_t>(back.size()));
  SendWr rd{.wr_id = 8,
            .opcode = Opcode::RdmaRead,
            .sg_list = {&back_sge, 1},
            .remote_addr = reinterpret_cast<std::uint64_t>(dst.data()),
            .rkey = dst_mr->rkey()};
  p.a->post_send(rd);
  wc = Pair::one(*p.cq_a);
  EXPECT_EQ(wc.status, WcStatus::Success) << to_string(wc.status);
  EXPECT_EQ(wc.byte_len, back.size());
  EXPECT_EQ(back, src);
}

TEST(InProcess, SendRecvWithImm) {
  Pair p;
  char msg[] = "hello rdmx";
  char buf[64] = {};
  auto smr = p.pd->register_memory(msg, sizeof(msg), Access::None);
  auto rmr = p.pd->register_memory(buf, sizeof(buf), Access::LocalWrite);
  Sge rs = rmr->sge(0, sizeof(buf));
  p.b->post_recv({.wr_id = 99, .sg_list = {&rs, 1}});
  Sge ss = smr->sge(0, sizeof(msg));
  p.a->post_send({.wr_id = 1, .opcode = Opcode::SendWithImm, .sg_list = {&ss, 1}, .imm_data = 0xabcd});
  auto wc = Pair::one(*p.cq_b);
  EXPECT_EQ(wc.status, WcStatus::Success) << to_string(wc.status);
  EXPECT_EQ(wc.opcode, WcOpcode::Recv);
  EXPECT_EQ(wc.wr_id, 99u);
  EXPECT_EQ(wc.byte_len, sizeof(msg));
  EXPECT_TRUE(wc.with_imm);
  EXPECT_EQ(wc.imm_data, 0xabcdu);
  EXPECT_STREQ(buf, msg);
  EXPECT_EQ(Pair::one(*p.cq_a).status, WcStatus::Success);
}

TEST(InProcess, WrongRkeyIsRemoteAccessErrorAndFlushes) {
  Pair p;
  std::uint64_t src = 42, dst = 0;
  auto smr = p.pd->register_memory(&src, 8, Access::None);
  auto dmr = p.pd->register_memory(&dst, 8, Access::LocalWrite | Access::RemoteWrite);
  Sge s = smr->sge(0, 8);
  p.a->post_send({.wr_id = 1,
                  .opcode = Opcode::RdmaWrite,
                  .sg_list = {&s, 1},
                  .remote_addr = reinterpret_cast<std::uint64_t>(&dst),
                  .rkey = dmr->rkey() ^ 1});
  p.a->post_send({.wr_id = 2,
                  .opcode = Opcode::RdmaWrite,
                  .sg_list = {&s, 1},
                  .remote_addr = reinterpret_cast<std::uint64_t>(&dst),
                  .rkey = dmr->rkey()});
  auto wc = Pair::one(*p.cq_a);
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, WcStatus::RemAccessErr) << to_string(wc.status);
  wc = Pair::one(*p.cq_a);
  EXPECT_EQ(wc.wr_id, 2u);
  EXPECT_EQ(wc.status, WcStatus::WrFlushErr) << to_string(wc.status);
  EXPECT_EQ(dst, 0u);
  EXPECT_EQ(p.a->state(), QpState::Error);
  EXPECT_NE(p.a->error_reason().find("REM_ACCESS_ERR"), std::string::npos) << p.a->error_reason();
}

TEST(InProcess, AtomicsAndRnr) {
  Pair p;
  alignas(8) std::uint64_t counter = 10, result = 0;
  auto cmr = p.pd->register_memory(&counter, 8, Access::LocalWrite | Access::RemoteAtomic);
  auto rmr = p.pd->register_memory(&result, 8, Access::LocalWrite);
  Sge r = rmr->sge(0, 8);
  p.a->post_send({.wr_id = 1,
                  .opcode = Opcode::AtomicFetchAdd,
                  .sg_list = {&r, 1},
                  .remote_addr = reinterpret_cast<std::uint64_t>(&counter),
                  .rkey = cmr->rkey(),
                  .compare_add = 5});
  EXPECT_EQ(Pair::one(*p.cq_a).status, WcStatus::Success);
  EXPECT_EQ(result, 10u);
  EXPECT_EQ(counter, 15u);
  p.a->post_send({.wr_id = 2,
                  .opcode = Opcode::AtomicCmpSwap,
                  .sg_list = {&r, 1},
                  .remote_addr = reinterpret_cast<std::uint64_t>(&counter),
                  .rkey = cmr->rkey(),
                  .compare_add = 15,
                  .swap = 100});
  EXPECT_EQ(Pair::one(*p.cq_a).status, WcStatus::Success);
  EXPECT_EQ(result, 15u);
  EXPECT_EQ(counter, 100u);
  // SEND with no receive posted: RNR retries, then RNR_RETRY_EXC_ERR.
  p.a->post_send({.wr_id = 3, .opcode = Opcode::Send});
  auto wc = Pair::one(*p.cq_a);
  EXPECT_EQ(wc.status, WcStatus::RnrRetryExcErr) << to_string(wc.status);
}

}  // namespace
