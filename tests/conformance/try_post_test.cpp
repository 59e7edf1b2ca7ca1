// SPDX-License-Identifier: MIT
// The non-throwing post: a full send queue is PostResult::QueueFull, not an
// exception, and the same QP posts again once its completions are polled.
#include <chrono>
#include <string>

#include "conformance/conformance.hpp"

namespace rdmx::test {
namespace {

using namespace std::chrono_literals;

TEST_P(Conformance, TryPostSendReportsAFullQueueAndPostsAfterPolling) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    Node node(env);
    Buffer buf(65536);
    auto mr = node.pd->register_memory(buf.data(), buf.size(), Access::LocalWrite);
    ConnectOptions long_rnr;  // the SENDs wait for receives the target posts late
    long_rnr.rnr_timeout = 60s;
    if (env.rank() == kTarget) {
      auto qp = connected_qp(env, node, kInitiator, "t", {}, long_rnr);  // no receive yet
      const auto sends = static_cast<std::uint32_t>(std::stoul(await(env, "full")));
      for (std::uint32_t i = 0; i <= sends; ++i) {
        Sge sge = mr->sge(64 * i, 64);
        qp->post_recv(RecvWr{.wr_id = i, .sg_list = {&sge, 1}});
      }
      WAIT_WCS(*node.recv_cq, sends + 1, "the SENDs, the one posted after polling included");
      env.barrier("done");
      return;
    }
    QpCaps caps;
    caps.max_send_wr = 4;
    auto qp = make_qp(node, caps);
    const std::uint32_t slots = qp->caps().max_send_wr;
    CHECK_GE(slots, 4u);
    CHECK_LE(slots, 64u) << "max_send_wr=4 was asked for";
    connect_qp(env, *qp, kTarget, "t", long_rnr);
    Sge sge = mr->sge(0, 64);
    for (std::uint32_t i = 0; i < slots; ++i) {
      CHECK_EQ(qp->try_post_send(send_wr(i, Opcode::Send, {&sge, 1})), PostResult::Ok) << "SEND " << i;
    }
    for (int again = 0; again < 3; ++again) {
      CHECK_EQ(qp->try_post_send(send_wr(999, Opcode::Send, {&sge, 1})), PostResult::QueueFull)
          << "a SEND beyond max_send_wr=" << slots << " (try " << again << ")";
    }
    CHECK_EQ(qp->state(), QpState::Rts) << "a full queue is no error: " << qp->error_reason();
    signal(env, "full", std::to_string(slots));
    auto done = WAIT_WCS(*node.send_cq, slots, "the SENDs that filled the queue");
    for (std::uint32_t i = 0; i < slots; ++i) CHECK_WC(done[i], "queued SEND", .wr_id = i, .status = WcStatus::Success);
    CHECK_EQ(qp->try_post_send(send_wr(1000, Opcode::Send, {&sge, 1})), PostResult::Ok)
        << "posting once the completions were polled";
    auto wc = WAIT_WC(*node.send_cq, "the SEND posted after polling");
    CHECK_WC(wc, "the SEND posted after polling", .wr_id = 1000, .status = WcStatus::Success);
    CHECK_NO_WC(*node.send_cq, "the refused SENDs must leave no completion");
    env.barrier("done");
  }));
}

}  // namespace
}  // namespace rdmx::test
