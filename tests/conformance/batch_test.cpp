// SPDX-License-Identifier: MIT
// post_send_batch: a list posted at once (one doorbell on hardware) behaves
// as the same work requests posted one by one; a malformed one in the middle
// is refused by index, with those before it posted and those after it not.
#include <cstring>
#include <vector>

#include "conformance/conformance.hpp"

namespace rdmx::test {
namespace {

constexpr std::size_t kSlot = 4096;
constexpr int kBatchWrites = 40;  // more than one doorbell's worth of hardware WRs

TEST_P(Conformance, BatchOfMixedWorkRequests) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    Node node(env);
    if (env.rank() == kTarget) {
      Buffer target(kSlot * (kBatchWrites + 2));
      set_bytes(target.data(), 0, target.size());
      fill_pattern(target.data() + kSlot * (kBatchWrites + 1), kSlot, 77);  // what the READ fetches
      auto mr = node.pd->register_memory(target.data(), target.size(),
                                         Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead);
      auto qp = make_qp(node);
      Sge recv = mr->sge(kSlot * kBatchWrites, static_cast<std::uint32_t>(kSlot));
      qp->post_recv(RecvWr{.wr_id = 500, .sg_list = {&recv, 1}});
      qp->post_recv(RecvWr{.wr_id = 501});
      publish_region(env, "region", *mr);
      connect_qp(env, *qp, kInitiator, "t");
      CHECK_WC(WAIT_WC(*node.recv_cq, "the SEND of the batch"), "SEND", .wr_id = 500, .status = WcStatus::Success,
               .opcode = WcOpcode::Recv, .byte_len = 100);
      CHECK_WC(WAIT_WC(*node.recv_cq, "the WRITE_WITH_IMM that ends the batch"), "WRITE_WITH_IMM", .wr_id = 501,
               .status = WcStatus::Success, .opcode = WcOpcode::RecvRdmaWithImm, .with_imm = true, .imm_data = 9);
      for (int i = 0; i < kBatchWrites; ++i) {
        CHECK_PATTERN(target.data() + kSlot * static_cast<std::size_t>(i), kSlot - static_cast<std::size_t>(i),
                      1000 + static_cast<std::uint64_t>(i), 0, "WRITE " + std::to_string(i) + " of the batch");
      }
      CHECK_PATTERN(target.data() + kSlot * kBatchWrites, 100, 55, 0, "SEND of the batch");
      env.barrier("done");
    } else {
      Buffer src(kSlot * (kBatchWrites + 2));
      for (int i = 0; i < kBatchWrites; ++i) {
        fill_pattern(src.data() + kSlot * static_cast<std::size_t>(i), kSlot, 1000 + static_cast<std::uint64_t>(i));
      }
      fill_pattern(src.data() + kSlot * kBatchWrites, 100, 55);
      set_bytes(src.data() + kSlot * (kBatchWrites + 1), 0, kSlot);
      auto mr = node.pd->register_memory(src.data(), src.size(), Access::LocalWrite);
      auto qp = connected_qp(env, node, kTarget, "t");
      RemoteRegion r = fetch_region(env, "region");
      std::vector<Sge> sges;
      sges.reserve(kBatchWrites + 2);
      std::vector<SendWr> wrs;
      for (int i = 0; i < kBatchWrites; ++i) {
        const std::size_t off = kSlot * static_cast<std::size_t>(i);
        sges.push_back(mr->sge(off, static_cast<std::uint32_t>(kSlot - static_cast<std::size_t>(i))));
        // Some signaled, most not: the unsignaled ones must stay silent.
        wrs.push_back(rdma_wr(static_cast<std::uint64_t>(i), Opcode::RdmaWrite, {&sges.back(), 1}, r.addr + off, r.rkey,
                              i % 10 == 9));
      }
      sges.push_back(mr->sge(kSlot * kBatchWrites, 100));
      wrs.push_back(send_wr(100, Opcode::Send, {&sges.back(), 1}));
      sges.push_back(mr->sge(kSlot * (kBatchWrites + 1), static_cast<std::uint32_t>(kSlot)));
      wrs.push_back(rdma_wr(101, Opcode::RdmaRead, {&sges.back(), 1}, r.addr + kSlot * (kBatchWrites + 1), r.rkey));
      SendWr imm = rdma_wr(102, Opcode::RdmaWriteWithImm, {}, r.addr, r.rkey);
      imm.imm_data = 9;
      wrs.push_back(imm);
      qp->post_send_batch(wrs);
      auto wcs = WAIT_WCS(*node.send_cq, 4 + 3, "the signaled completions of the batch");
      const std::uint64_t expected[] = {9, 19, 29, 39, 100, 101, 102};
      for (std::size_t i = 0; i < wcs.size(); ++i) {
        CHECK_WC(wcs[i], "completion " + std::to_string(i) + " of the batch", .wr_id = expected[i],
                 .status = WcStatus::Success);
      }
      CHECK_EQ(wcs[5].opcode, WcOpcode::RdmaRead);
      CHECK_PATTERN(src.data() + kSlot * (kBatchWrites + 1), kSlot, 77, 0, "READ of the batch");
      CHECK_NO_WC(*node.send_cq, "send CQ after the batch");
      env.barrier("done");
    }
  }));
}

TEST_P(Conformance, BatchStopsAtAMalformedWorkRequest) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    Node node(env);
    Buffer buf(4096);
    set_bytes(buf.data(), 0, buf.size());
    auto mr = node.pd->register_memory(buf.data(), buf.size(), Access::LocalWrite | Access::RemoteWrite);
    if (env.rank() == kTarget) {
      auto qp = connected_qp(env, node, kInitiator, "t");
      publish_region(env, "region", *mr);
      env.barrier("done");
      CHECK_PATTERN(buf.data(), 64, 3, 0, "the two WRITEs before the malformed one");
      CHECK_BYTES(buf.data() + 64, 64, 0, "where the WRITE after the malformed one would have gone");
    } else {
      fill_pattern(buf.data(), 128, 3);
      auto qp = connected_qp(env, node, kTarget, "t");
      RemoteRegion r = fetch_region(env, "region");
      Sge a = mr->sge(0, 32), b = mr->sge(32, 32), c = mr->sge(64, 64), atomic = mr->sge(3, 8);
      std::vector<SendWr> wrs = {
          rdma_wr(1, Opcode::RdmaWrite, {&a, 1}, r.addr, r.rkey),
          rdma_wr(2, Opcode::RdmaWrite, {&b, 1}, r.addr + 32, r.rkey),
          rdma_wr(3, Opcode::AtomicFetchAdd, {&atomic, 1}, r.addr + 3, r.rkey),  // misaligned target: refused
          rdma_wr(4, Opcode::RdmaWrite, {&c, 1}, r.addr + 64, r.rkey),
      };
      try {
        qp->post_send_batch(wrs);
        FAIL_RANK() << "a batch with a misaligned atomic was accepted";
      } catch (const Error& e) {
        CHECK_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
        CHECK(std::string(e.what()).find("work request 2 of 4 (wr_id 3)") != std::string::npos) << e.what();
      }
      auto wcs = WAIT_WCS(*node.send_cq, 2, "the two WRITEs posted before the malformed one");
      CHECK_WC(wcs[0], "first WRITE", .wr_id = 1, .status = WcStatus::Success);
      CHECK_WC(wcs[1], "second WRITE", .wr_id = 2, .status = WcStatus::Success);
      CHECK_NO_WC(*node.send_cq, "send CQ: nothing after the malformed one was posted");
      CHECK_EQ(qp->state(), QpState::Rts);
      env.barrier("done");
    }
  }));
}

}  // namespace
}  // namespace rdmx::test
