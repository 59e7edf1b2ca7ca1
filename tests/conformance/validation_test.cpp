// SPDX-License-Identifier: MIT
// Post-time and API validation: malformed requests throw rdmx::Error with the
// documented code and a message naming the operation; the QP is unaffected.
#include <chrono>
#include <cstring>

#include "conformance/conformance.hpp"

namespace rdmx::test {
namespace {

using namespace std::chrono_literals;

void check_names(const Error& e, const char* op) {
  CHECK(!e.message().empty()) << "error without a message: " << e.what();
  CHECK(std::string(e.what()).find(op) != std::string::npos) << "error does not name \"" << op << "\": " << e.what();
}

TEST_P(Conformance, PostBeforeReadyIsInvalidState) {
  ASSERT_TRUE(run(1, [](RankEnv& env) {
    Node node(env);
    Buffer buf(4096);
    auto mr = node.pd->register_memory(buf.data(), buf.size(), Access::LocalWrite);
    Sge sge = mr->sge(0, 64);
    auto qp = node.device->create_qp(*node.pd, *node.send_cq, *node.recv_cq);
    CHECK_EQ(qp->state(), QpState::Reset);
    check_names(EXPECT_RDMX_ERROR(ErrorCode::InvalidState, qp->post_recv(RecvWr{.wr_id = 1, .sg_list = {&sge, 1}})),
                "post_recv");
    check_names(EXPECT_RDMX_ERROR(ErrorCode::InvalidState, qp->post_send(send_wr(2, Opcode::Send, {&sge, 1}))),
                "post_send");
    qp->init();
    CHECK_EQ(qp->state(), QpState::Init);
    qp->post_recv(RecvWr{.wr_id = 3, .sg_list = {&sge, 1}});  // allowed in INIT
    check_names(EXPECT_RDMX_ERROR(ErrorCode::InvalidState, qp->post_send(send_wr(4, Opcode::Send, {&sge, 1}))),
                "post_send");
    CHECK_EQ(qp->state(), QpState::Init) << "refused posts must not change the state";
    CHECK_NO_WC(*node.send_cq, "after refused posts");
  }));
}

TEST_P(Conformance, MalformedWorkRequestsAreInvalidArgument) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    Node node(env);
    Buffer buf(65536);
    auto mr =
        node.pd->register_memory(buf.data(), buf.size(), Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead);
    if (env.rank() == kTarget) {
      auto qp = connected_qp(env, node, kInitiator, "t");
      publish_region(env, "region", *mr);
      env.barrier("done");
      CHECK_PATTERN(buf.data(), 64, 141, 0, "the valid WRITE after the refused posts");
      return;
    }
    auto qp = connected_qp(env, node, kTarget, "t");
    RemoteRegion r = fetch_region(env, "region");
    const QpCaps caps = qp->caps();

    std::vector<Sge> too_many_send(caps.max_send_sge + 1, mr->sge(0, 8));
    check_names(EXPECT_RDMX_ERROR(ErrorCode::InvalidArgument, qp->post_send(send_wr(1, Opcode::Send, too_many_send))),
                "post_send");
    check_names(EXPECT_RDMX_ERROR(ErrorCode::InvalidArgument,
                                  qp->post_send(rdma_wr(1, Opcode::RdmaWrite, too_many_send, r.addr, r.rkey))),
                "post_send");
    std::vector<Sge> too_many_recv(caps.max_recv_sge + 1, mr->sge(0, 8));
    check_names(
        EXPECT_RDMX_ERROR(ErrorCode::InvalidArgument, qp->post_recv(RecvWr{.wr_id = 1, .sg_list = too_many_recv})),
        "post_recv");

    Sge one = mr->sge(0, 8);
    SendWr bad_opcode = send_wr(2, static_cast<Opcode>(200), {&one, 1});
    check_names(EXPECT_RDMX_ERROR(ErrorCode::InvalidArgument, qp->post_send(bad_opcode)), "post_send");

    Sge two[] = {mr->sge(0, 8), mr->sge(8, 8)};
    SendWr atomic_two = rdma_wr(3, Opcode::AtomicFetchAdd, two, r.addr, r.rkey);
    check_names(EXPECT_RDMX_ERROR(ErrorCode::InvalidArgument, qp->post_send(atomic_two)), "post_send");
    SendWr atomic_none = rdma_wr(4, Opcode::AtomicCmpSwap, {}, r.addr, r.rkey);
    check_names(EXPECT_RDMX_ERROR(ErrorCode::InvalidArgument, qp->post_send(atomic_none)), "post_send");

    CHECK_EQ(qp->state(), QpState::Rts) << "refused posts must not change the QP state";
    CHECK_NO_WC(*node.send_cq, "after refused posts");
    CHECK_NO_WC(*node.recv_cq, "after refused posts");

    // The QP still works.
    fill_pattern(buf.data() + 4096, 64, 141);
    auto wc = RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, mr->sge(4096, 64), r.addr, r.rkey, 9);
    CHECK_WC(wc, "valid WRITE after refused posts", .wr_id = 9, .status = WcStatus::Success);
    env.barrier("done");
  }));
}

// A full receive queue (INIT) and a full send queue (SENDs held by RNR) throw
// QueueFull; the queued work is unaffected and is flushed by set_error().
TEST_P(Conformance, FullQueuesAreQueueFull) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    Node node(env);
    Buffer buf(65536);
    auto mr = node.pd->register_memory(buf.data(), buf.size(), Access::LocalWrite);
    ConnectOptions long_rnr;
    long_rnr.rnr_timeout = 60s;
    if (env.rank() == kTarget) {
      auto qp = connected_qp(env, node, kInitiator, "t", {}, long_rnr);  // posts no receive
      await(env, "finished");
      env.barrier("done");
      return;
    }
    QpCaps caps;
    caps.max_send_wr = 4;
    caps.max_recv_wr = 4;
    auto qp = make_qp(node, caps);
    const std::uint32_t recv_slots = qp->caps().max_recv_wr;
    const std::uint32_t send_slots = qp->caps().max_send_wr;
    CHECK_GE(recv_slots, 4u);
    CHECK_GE(send_slots, 4u);
    CHECK_LE(recv_slots, 64u) << "max_recv_wr=4 was asked for";
    CHECK_LE(send_slots, 64u) << "max_send_wr=4 was asked for";
    Sge sge = mr->sge(0, 64);
    for (std::uint32_t i = 0; i < recv_slots; ++i) qp->post_recv(RecvWr{.wr_id = 100 + i, .sg_list = {&sge, 1}});
    check_names(EXPECT_RDMX_ERROR(ErrorCode::QueueFull, qp->post_recv(RecvWr{.wr_id = 999, .sg_list = {&sge, 1}})),
                "post_recv");
    connect_qp(env, *qp, kTarget, "t", long_rnr);
    for (std::uint32_t i = 0; i < send_slots; ++i) qp->post_send(send_wr(i, Opcode::Send, {&sge, 1}));
    check_names(EXPECT_RDMX_ERROR(ErrorCode::QueueFull, qp->post_send(send_wr(999, Opcode::Send, {&sge, 1}))),
                "post_send");
    qp->set_error("test done");
    auto sends = WAIT_WCS(*node.send_cq, send_slots, "flushed SENDs");
    for (std::uint32_t i = 0; i < send_slots; ++i) {
      CHECK_WC(sends[i], "queued SEND", .wr_id = i, .status = WcStatus::WrFlushErr);
    }
    auto recvs = WAIT_WCS(*node.recv_cq, recv_slots, "flushed receives");
    for (std::uint32_t i = 0; i < recv_slots; ++i) {
      CHECK_WC(recvs[i], "queued receive", .wr_id = 100 + i, .status = WcStatus::WrFlushErr);
    }
    CHECK_NO_WC(*node.send_cq, "the refused SEND must leave no completion");
    CHECK_NO_WC(*node.recv_cq, "the refused receive must leave no completion");
    signal(env, "finished");
    env.barrier("done");
  }));
}

TEST_P(Conformance, RegistrationAndAddressValidation) {
  ASSERT_TRUE(run(1, [](RankEnv& env) {
    Node node(env);
    Buffer buf(4096);
    check_names(
        EXPECT_RDMX_ERROR(ErrorCode::InvalidArgument, node.pd->register_memory(nullptr, 64, Access::LocalWrite)),
        "register");
    EXPECT_RDMX_ERROR(ErrorCode::InvalidArgument, node.pd->register_memory(buf.data(), 64, Access::RemoteWrite));
    EXPECT_RDMX_ERROR(ErrorCode::InvalidArgument, node.pd->register_memory(buf.data(), 64, Access::RemoteAtomic));
    // Keys: unique while registered, lkey/rkey reported.
    auto a = node.pd->register_memory(buf.data(), 4096, Access::LocalWrite | Access::RemoteWrite);
    auto b = node.pd->register_memory(buf.data(), 4096, Access::LocalWrite | Access::RemoteWrite);
    CHECK_NE(a->rkey(), b->rkey()) << "two registrations share an rkey";
    CHECK_NE(a->lkey(), b->lkey()) << "two registrations share an lkey";
    CHECK_EQ(a->addr(), static_cast<void*>(buf.data()));
    CHECK_EQ(a->length(), 4096u);
    Sge s = a->sge(16, 32);
    CHECK_EQ(s.addr, buf.addr(16));
    CHECK_EQ(s.length, 32u);
    CHECK_EQ(s.lkey, a->lkey());

    EXPECT_RDMX_ERROR(ErrorCode::InvalidArgument, QpAddress::from_hex("xyz1"));
    EXPECT_RDMX_ERROR(ErrorCode::InvalidArgument, QpAddress::from_hex("abc"));  // odd length
    auto err = EXPECT_RDMX_ERROR(ErrorCode::NotFound, rdmx::open_device("no-such-provider"));
    CHECK(std::string(err.what()).find(env.provider()) != std::string::npos)
        << "the NotFound error must list the providers that exist: " << err.what();
  }));
}

}  // namespace
}  // namespace rdmx::test
