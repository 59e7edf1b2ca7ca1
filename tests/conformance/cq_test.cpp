// SPDX-License-Identifier: MIT
// Completion queues: overflow is an error, never a silent loss; wait() times out.
#include <chrono>
#include <cstring>

#include "conformance/conformance.hpp"

namespace rdmx::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// After an overflow, poll() and wait() throw QueueFull, every time.
void check_overflowed(CompletionQueue& cq, QueuePair& qp, bool qp_in_error, const char* side) {
  WorkCompletion wcs[8];
  std::size_t n = 0;
  try {
    n = cq.poll(wcs);
  } catch (const Error& e) {
    CHECK_EQ(e.code(), ErrorCode::QueueFull) << side << ": poll() after overflow: " << e.what();
    CHECK(!e.message().empty());
    CHECK(qp_in_error) << side << ": the CQ overflowed but its QP never moved to ERROR (state " << to_string(qp.state())
                       << ")";
    EXPECT_RDMX_ERROR(ErrorCode::QueueFull, cq.poll(wcs));
    auto waited = EXPECT_RDMX_ERROR(ErrorCode::QueueFull, cq.wait(wcs, 100ms));
    std::fprintf(stderr, "[rank %d] %s overflow: %s\n", current_rank(), side, waited.what());
    return;
  }
  FAIL_RANK() << side << ": 8 signaled completions on a CQ of depth 4: poll() returned " << n
              << " completions instead of throwing QueueFull (QP state " << to_string(qp.state())
              << (qp_in_error ? "" : ", never moved to ERROR") << ")";
}

TEST_P(Conformance, CqOverflowOnSendSide) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    Node node(env);
    if (env.rank() == kTarget) {
      Buffer target(4096);
      auto mr = node.pd->register_memory(target.data(), target.size(), Access::LocalWrite | Access::RemoteWrite);
      auto qp = connected_qp(env, node, kInitiator, "t");
      publish_region(env, "region", *mr);
      env.barrier("done");
    } else {
      Buffer local(4096);
      auto mr = node.pd->register_memory(local.data(), local.size(), Access::LocalWrite);
      auto small = node.device->create_cq(4);
      CHECK_GE(small->depth(), 4u);
      CHECK_LT(small->depth(), 8u) << "this test needs a CQ that holds fewer than 8 completions";
      QpCaps caps;
      caps.max_send_wr = 16;
      auto qp = make_qp(*node.device, *node.pd, *small, *node.recv_cq, caps);
      connect_qp(env, *qp, kTarget, "t");
      RemoteRegion r = fetch_region(env, "region");
      Sge sge = mr->sge(0, 64);
      for (std::uint64_t i = 0; i < 8; ++i) qp->post_send(rdma_wr(i, Opcode::RdmaWrite, {&sge, 1}, r.addr, r.rkey));
      bool in_error = eventually([&] { return qp->state() == QpState::Error; }, 5000ms);
      check_overflowed(*small, *qp, in_error, "send CQ");
      env.barrier("done");
    }
  }));
}

TEST_P(Conformance, CqOverflowOnReceiveSide) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    Node node(env);
    Buffer buf(65536);
    auto mr = node.pd->register_memory(buf.data(), buf.size(), Access::LocalWrite);
    if (env.rank() == kTarget) {
      auto small = node.device->create_cq(4);
      CHECK_LT(small->depth(), 8u) << "this test needs a CQ that holds fewer than 8 completions";
      auto qp = make_qp(*node.device, *node.pd, *node.send_cq, *small);
      for (std::uint64_t i = 0; i < 8; ++i) {
        Sge sge = mr->sge(1024 * i, 1024);
        qp->post_recv(RecvWr{.wr_id = i, .sg_list = {&sge, 1}});
      }
      connect_qp(env, *qp, kInitiator, "t");
      bool in_error = eventually([&] { return qp->state() == QpState::Error; }, 5000ms);
      check_overflowed(*small, *qp, in_error, "recv CQ");
      signal(env, "checked");
      env.barrier("done");
    } else {
      auto qp = connected_qp(env, node, kTarget, "t");
      for (std::uint64_t i = 0; i < 8; ++i) {
        Sge sge = mr->sge(0, 16);
        qp->post_send(send_wr(i, Opcode::Send, {&sge, 1}));
      }
      // Whatever happens to these SENDs once the receiver's QP is in ERROR is
      // not this test's business; the receiver checks its CQ.
      await(env, "checked");
      env.barrier("done");
    }
  }));
}

TEST_P(Conformance, CqWaitTimesOut) {
  ASSERT_TRUE(run(1, [](RankEnv& env) {
    auto cq = env.device().create_cq(16);
    WorkCompletion wcs[4];
    CHECK_EQ(cq->poll(wcs), 0u) << "a new CQ is empty";
    for (auto timeout : {0ms, 50ms, 300ms}) {
      auto start = Clock::now();
      auto err = EXPECT_RDMX_ERROR(ErrorCode::Timeout, cq->wait(wcs, timeout));
      auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
      CHECK(!err.message().empty());
      CHECK_GE(elapsed.count(), timeout.count() - 1) << "wait(" << timeout.count() << " ms) returned early";
      CHECK_LT(elapsed.count(), timeout.count() + 2000) << "wait(" << timeout.count() << " ms) overran";
    }
  }));
}

}  // namespace
}  // namespace rdmx::test
