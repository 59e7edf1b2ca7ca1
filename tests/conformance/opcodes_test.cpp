// SPDX-License-Identifier: MIT
// Every opcode once, with every completion field checked on both sides.
// Rank 0 is the target/receiver, rank 1 the initiator/sender.
#include <atomic>
#include <cstring>

#include "conformance/conformance.hpp"

namespace rdmx::test {
namespace {

// SEND / SEND_WITH_IMM of `len` bytes into a larger receive buffer.
void send_case(RankEnv& env, bool with_imm) {
  constexpr std::uint32_t kLen = 1000;
  constexpr std::uint32_t kImm = 0xDEADBEEF;
  constexpr std::uint64_t kSeed = 11;
  Node node(env);
  Buffer buf(4096);
  if (env.rank() == kTarget) {
    set_bytes(buf.data(), 0xEE, buf.size());
    auto mr = node.pd->register_memory(buf.data(), buf.size(), Access::LocalWrite);
    auto qp = make_qp(node);
    Sge sge = mr->sge(0, 4096);
    qp->post_recv(RecvWr{.wr_id = 0xAB01, .sg_list = {&sge, 1}});
    connect_qp(env, *qp, kInitiator, "t");
    auto wc = WAIT_WC(*node.recv_cq, "the receive");
    CHECK_WC(wc, "receive completion", .wr_id = 0xAB01, .status = WcStatus::Success, .opcode = WcOpcode::Recv,
             .byte_len = kLen, .qp_num = qp->qp_num(), .with_imm = with_imm);
    if (with_imm) {
      CHECK_EQ(wc.imm_data, kImm) << "imm_data must arrive in host order";
    }
    CHECK_PATTERN(buf.data(), kLen, kSeed, 0, "received payload");
    CHECK_BYTES(buf.data() + kLen, buf.size() - kLen, 0xEE, "receive buffer past the message");
    CHECK_NO_WC(*node.recv_cq, "receiver recv CQ after the one message");
    CHECK_NO_WC(*node.send_cq, "receiver send CQ");
    env.barrier("done");
  } else {
    fill_pattern(buf.data(), kLen, kSeed);
    auto mr = node.pd->register_memory(buf.data(), buf.size(), Access::LocalWrite);
    auto qp = connected_qp(env, node, kTarget, "t");
    Sge sge = mr->sge(0, kLen);
    SendWr wr = send_wr(0xCD02, with_imm ? Opcode::SendWithImm : Opcode::Send, {&sge, 1});
    wr.imm_data = kImm;
    qp->post_send(wr);
    auto wc = WAIT_WC(*node.send_cq, "the send");
    CHECK_WC(wc, "send completion", .wr_id = 0xCD02, .status = WcStatus::Success, .opcode = WcOpcode::Send,
             .qp_num = qp->qp_num());
    CHECK_NO_WC(*node.send_cq, "sender send CQ after the one send");
    CHECK_NO_WC(*node.recv_cq, "sender recv CQ");
    env.barrier("done");
  }
}

TEST_P(Conformance, Send) {
  ASSERT_TRUE(run(2, [](RankEnv& env) { send_case(env, false); }));
}

TEST_P(Conformance, SendWithImm) {
  ASSERT_TRUE(run(2, [](RankEnv& env) { send_case(env, true); }));
}

// RDMA WRITE (WITH_IMM) of 5000 bytes to offset 100 of an 8 KiB region.
void write_case(RankEnv& env, bool with_imm) {
  constexpr std::uint32_t kLen = 5000;
  constexpr std::uint32_t kOffset = 100;
  constexpr std::uint32_t kImm = 0x01020304;
  constexpr std::uint64_t kSeed = 12;
  Node node(env);
  if (env.rank() == kTarget) {
    Buffer target(8192);
    Buffer rbuf(64);
    set_bytes(rbuf.data(), 0xEE, rbuf.size());
    auto mr = node.pd->register_memory(target.data(), target.size(), Access::LocalWrite | Access::RemoteWrite);
    auto rmr = node.pd->register_memory(rbuf.data(), rbuf.size(), Access::LocalWrite);
    auto qp = make_qp(node);
    Sge rsge = rmr->sge(0, 64);
    qp->post_recv(RecvWr{.wr_id = 0x77, .sg_list = {&rsge, 1}});
    publish_region(env, "region", *mr);
    connect_qp(env, *qp, kInitiator, "t");
    auto wc = WAIT_WC(*node.recv_cq, "the receive");
    if (with_imm) {
      // WRITE_WITH_IMM consumes the receive but places nothing in its buffer.
      CHECK_WC(wc, "write-with-imm completion", .wr_id = 0x77, .status = WcStatus::Success,
               .opcode = WcOpcode::RecvRdmaWithImm, .byte_len = kLen, .qp_num = qp->qp_num(), .with_imm = true,
               .imm_data = kImm);
      CHECK_BYTES(rbuf.data(), rbuf.size(), 0xEE, "receive buffer of a WRITE_WITH_IMM");
    } else {
      // The plain WRITE consumed no receive: the receive is consumed by the SEND that follows it.
      CHECK_WC(wc, "receive completion (of the SEND after the WRITE)", .wr_id = 0x77, .status = WcStatus::Success,
               .opcode = WcOpcode::Recv, .byte_len = 8, .qp_num = qp->qp_num(), .with_imm = false);
    }
    CHECK_BYTES(target.data(), kOffset, 0, "target bytes before the written range");
    CHECK_PATTERN(target.data() + kOffset, kLen, kSeed, 0, "written range");
    CHECK_BYTES(target.data() + kOffset + kLen, target.size() - kOffset - kLen, 0,
                "target bytes after the written range");
    CHECK_NO_WC(*node.recv_cq, "target recv CQ");
    CHECK_NO_WC(*node.send_cq, "target send CQ");
    env.barrier("done");
  } else {
    Buffer src(8192);
    fill_pattern(src.data(), kLen, kSeed);
    auto mr = node.pd->register_memory(src.data(), src.size(), Access::LocalWrite);
    auto qp = connected_qp(env, node, kTarget, "t");
    RemoteRegion region = fetch_region(env, "region");
    Sge sge = mr->sge(0, kLen);
    SendWr wr = rdma_wr(0x1234, with_imm ? Opcode::RdmaWriteWithImm : Opcode::RdmaWrite, {&sge, 1},
                        region.addr + kOffset, region.rkey);
    wr.imm_data = kImm;
    qp->post_send(wr);
    auto wc = WAIT_WC(*node.send_cq, "the write");
    CHECK_WC(wc, "write completion", .wr_id = 0x1234, .status = WcStatus::Success, .opcode = WcOpcode::RdmaWrite,
             .qp_num = qp->qp_num());
    if (!with_imm) {
      Sge note = mr->sge(kLen, 8);
      qp->post_send(send_wr(0x1235, Opcode::Send, {&note, 1}));
      CHECK_WC(WAIT_WC(*node.send_cq, "the send"), "send completion", .wr_id = 0x1235, .status = WcStatus::Success,
               .opcode = WcOpcode::Send, .qp_num = qp->qp_num());
    }
    CHECK_NO_WC(*node.send_cq, "initiator send CQ");
    CHECK_NO_WC(*node.recv_cq, "initiator recv CQ");
    env.barrier("done");
  }
}

TEST_P(Conformance, RdmaWrite) {
  ASSERT_TRUE(run(2, [](RankEnv& env) { write_case(env, false); }));
}

TEST_P(Conformance, RdmaWriteWithImm) {
  ASSERT_TRUE(run(2, [](RankEnv& env) { write_case(env, true); }));
}

// RDMA READ: the target does nothing but wait at a barrier (auto progress).
TEST_P(Conformance, RdmaRead) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    constexpr std::uint32_t kLen = 6000;
    constexpr std::uint64_t kSeed = 13;
    Node node(env);
    if (env.rank() == kTarget) {
      Buffer target(8192);
      fill_pattern(target.data(), target.size(), kSeed);
      auto mr = node.pd->register_memory(target.data(), target.size(), Access::LocalWrite | Access::RemoteRead);
      auto qp = connected_qp(env, node, kInitiator, "t");
      publish_region(env, "region", *mr);
      env.barrier("done");
      CHECK_PATTERN(target.data(), target.size(), kSeed, 0, "target region after being read");
      CHECK_NO_WC(*node.recv_cq, "target recv CQ");
      CHECK_NO_WC(*node.send_cq, "target send CQ");
    } else {
      Buffer dst(8192);
      set_bytes(dst.data(), 0xEE, dst.size());
      auto mr = node.pd->register_memory(dst.data(), dst.size(), Access::LocalWrite);
      auto qp = connected_qp(env, node, kTarget, "t");
      RemoteRegion region = fetch_region(env, "region");
      Sge sge = mr->sge(16, kLen);
      qp->post_send(rdma_wr(0x5151, Opcode::RdmaRead, {&sge, 1}, region.addr + 1000, region.rkey));
      auto wc = WAIT_WC(*node.send_cq, "the read");
      CHECK_WC(wc, "read completion", .wr_id = 0x5151, .status = WcStatus::Success, .opcode = WcOpcode::RdmaRead,
               .byte_len = kLen, .qp_num = qp->qp_num());
      CHECK_BYTES(dst.data(), 16, 0xEE, "bytes before the read destination");
      CHECK_PATTERN(dst.data() + 16, kLen, kSeed, 1000, "read data");
      CHECK_BYTES(dst.data() + 16 + kLen, dst.size() - 16 - kLen, 0xEE, "bytes after the read destination");
      CHECK_NO_WC(*node.send_cq, "initiator send CQ");
      env.barrier("done");
    }
  }));
}

// Target word layout for the atomic tests: [0] guard, [1] the word, [2] guard.
constexpr std::uint64_t kGuard = 0x6767676767676767ull;

void atomic_target(RankEnv& env, Node& node, std::uint64_t initial, std::uint64_t expected_final) {
  Buffer target(4096);
  target.store64(0, kGuard);
  target.store64(8, initial);
  target.store64(16, kGuard);
  auto mr = node.pd->register_memory(target.data(), target.size(), Access::LocalWrite | Access::RemoteAtomic);
  auto qp = connected_qp(env, node, kInitiator, "t");
  publish_region(env, "region", RemoteRegion{target.addr(8), mr->rkey(), 8});
  env.barrier("done");
  std::uint64_t word = target.load64(8);
  CHECK_EQ(word, expected_final) << "target word after the atomics";
  CHECK_EQ(target.load64(0), kGuard) << "word before the atomic target";
  CHECK_EQ(target.load64(16), kGuard) << "word after the atomic target";
  CHECK_NO_WC(*node.recv_cq, "target recv CQ");
  CHECK_NO_WC(*node.send_cq, "target send CQ");
}

TEST_P(Conformance, AtomicFetchAdd) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    constexpr std::uint64_t kBig = 1ull << 40;
    Node node(env);
    if (env.rank() == kTarget) {
      atomic_target(env, node, 100, 100 + 5 + kBig - 1);
      return;
    }
    Buffer result(4096);
    auto mr = node.pd->register_memory(result.data(), result.size(), Access::LocalWrite);
    auto qp = connected_qp(env, node, kTarget, "t");
    RemoteRegion region = fetch_region(env, "region");
    struct Step {
      std::uint64_t add;
      std::uint64_t old;
    };
    const Step steps[] = {{5, 100}, {kBig, 105}, {~0ull /* -1: wraps */, 105 + kBig}};
    std::uint64_t id = 1;
    for (const auto& step : steps) {
      result.store64(8, 0xFFFFFFFFFFFFFFFFull);
      auto wc = ATOMIC_SYNC(*qp, *node.send_cq, Opcode::AtomicFetchAdd, mr->sge(8, 8), region.addr, region.rkey,
                            step.add, 0, id);
      CHECK_WC(wc, "fetch-add completion", .wr_id = id, .status = WcStatus::Success, .opcode = WcOpcode::FetchAdd,
               .byte_len = 8, .qp_num = qp->qp_num());
      CHECK_EQ(result.load64(8), step.old) << "original value returned by fetch-add #" << id;
      ++id;
    }
    env.barrier("done");
  }));
}

TEST_P(Conformance, AtomicCmpSwap) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    Node node(env);
    if (env.rank() == kTarget) {
      atomic_target(env, node, 7, 0xFFFFFFFF00000001ull);
      return;
    }
    Buffer result(4096);
    auto mr = node.pd->register_memory(result.data(), result.size(), Access::LocalWrite);
    auto qp = connected_qp(env, node, kTarget, "t");
    RemoteRegion region = fetch_region(env, "region");
    struct Step {
      std::uint64_t compare, swap, old;
    };
    const Step steps[] = {
        {7, 42, 7},                                          // equal: swaps
        {7, 99, 42},                                         // not equal: leaves 42
        {42, 0xFFFFFFFF00000001ull, 42},                     // equal: swaps (high bits matter)
        {0x00000000000000001ull, 5, 0xFFFFFFFF00000001ull},  // low half equal only: no swap
    };
    std::uint64_t id = 1;
    for (const auto& step : steps) {
      result.store64(8, 0x1111111111111111ull);
      auto wc = ATOMIC_SYNC(*qp, *node.send_cq, Opcode::AtomicCmpSwap, mr->sge(8, 8), region.addr, region.rkey,
                            step.compare, step.swap, id);
      CHECK_WC(wc, "compare-swap completion", .wr_id = id, .status = WcStatus::Success, .opcode = WcOpcode::CompSwap,
               .byte_len = 8, .qp_num = qp->qp_num());
      CHECK_EQ(result.load64(8), step.old) << "original value returned by compare-swap #" << id;
      ++id;
    }
    env.barrier("done");
  }));
}

// The device and QP report what they are.
TEST_P(Conformance, DeviceAndQpBasics) {
  ASSERT_TRUE(run(1, [](RankEnv& env) {
    Device& dev = env.device();
    CHECK_EQ(dev.provider(), env.provider());
    CHECK(!dev.name().empty());
    CHECK(!dev.selection_reason().empty());
    DeviceCaps caps = dev.caps();
    CHECK(caps.auto_progress) << "READ and atomics must be served without target calls";
    CHECK_GE(caps.max_msg_size, 1ull << 30) << "max_msg_size";
    CHECK_GE(caps.max_qp_wr, 1024u);
    CHECK_GE(caps.max_sge, 16u);
    Node node(env);
    auto a = make_qp(node);
    auto b = make_qp(node);
    CHECK_NE(a->qp_num(), b->qp_num()) << "qp_num must be unique within a device";
    CHECK_EQ(a->provider(), env.provider());
    CHECK(a->error_reason().empty()) << a->error_reason();
    QpCaps qc = a->caps();
    CHECK_GE(qc.max_send_wr, 1024u);
    CHECK_GE(qc.max_recv_wr, 1024u);
    CHECK_GE(qc.max_send_sge, 16u);
    CHECK_GE(qc.max_recv_sge, 16u);
    QpAddress addr = a->local_address();
    CHECK(!addr.bytes.empty());
    std::string hex = addr.to_hex();
    CHECK(QpAddress::from_hex(hex).bytes == addr.bytes) << "to_hex/from_hex must round-trip: " << hex;
    CHECK(a->local_address().bytes != b->local_address().bytes) << "two QPs with one address";
  }));
}

}  // namespace
}  // namespace rdmx::test
