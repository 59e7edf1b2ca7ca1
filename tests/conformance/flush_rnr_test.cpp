// SPDX-License-Identifier: MIT
// Flushing after an error, RNR retry, and unsignaled work requests.
#include <chrono>
#include <cstring>

#include "conformance/conformance.hpp"
#include "services/config.hpp"

namespace rdmx::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

long long ms_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// A WRITE with a bad rkey followed by good WRITEs: the first completes with
// REM_ACCESS_ERR, every later one with WR_FLUSH_ERR (none of them runs), and
// the receives posted on the QP are flushed too.
TEST_P(Conformance, ErrorFlushesLaterWorkAndReceives) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    constexpr int kGood = 6;
    constexpr int kRecvs = 3;
    Node node(env);
    if (env.rank() == kTarget) {
      Buffer target(65536);
      fill_pattern(target.data(), target.size(), 91);
      auto mr = node.pd->register_memory(target.data(), target.size(), Access::LocalWrite | Access::RemoteWrite);
      auto qp = connected_qp(env, node, kInitiator, "t");
      publish_region(env, "region", *mr);
      await(env, "flushed");
      CHECK_PATTERN(target.data(), target.size(), 91, 0,
                    "target memory: the WRITEs after the failed one were flushed, so none may have run");
      env.barrier("done");
    } else {
      Buffer local(65536);
      fill_pattern(local.data(), local.size(), 92);
      auto mr = node.pd->register_memory(local.data(), local.size(), Access::LocalWrite);
      auto qp = make_qp(node);
      for (int i = 0; i < kRecvs; ++i) {
        Sge sge = mr->sge(4096 * static_cast<std::size_t>(i), 4096);
        qp->post_recv(RecvWr{.wr_id = 100u + static_cast<std::uint64_t>(i), .sg_list = {&sge, 1}});
      }
      connect_qp(env, *qp, kTarget, "t");
      RemoteRegion r = fetch_region(env, "region");
      Sge sge = mr->sge(0, 4096);
      qp->post_send(rdma_wr(1, Opcode::RdmaWrite, {&sge, 1}, r.addr, r.rkey ^ 0x77777777u));
      for (int i = 0; i < kGood; ++i) {
        Sge good = mr->sge(4096 * static_cast<std::size_t>(i), 4096);
        qp->post_send(rdma_wr(2 + static_cast<std::uint64_t>(i), Opcode::RdmaWrite, {&good, 1},
                              r.addr + 4096 * static_cast<std::size_t>(i), r.rkey));
      }
      auto wcs = WAIT_WCS(*node.send_cq, 1 + kGood, "the failed WRITE and the WRITEs after it");
      CHECK_WC(wcs[0], "WRITE with a bad rkey", .wr_id = 1, .status = WcStatus::RemAccessErr, .qp_num = qp->qp_num());
      for (int i = 0; i < kGood; ++i) {
        CHECK_WC(wcs[static_cast<std::size_t>(1 + i)], "WRITE posted after the failing one",
                 .wr_id = 2 + static_cast<std::uint64_t>(i), .status = WcStatus::WrFlushErr, .qp_num = qp->qp_num());
      }
      auto rwcs = WAIT_WCS(*node.recv_cq, kRecvs, "flushed receives");
      for (int i = 0; i < kRecvs; ++i) {
        CHECK_WC(rwcs[static_cast<std::size_t>(i)], "receive flushed by the error",
                 .wr_id = 100 + static_cast<std::uint64_t>(i), .status = WcStatus::WrFlushErr, .qp_num = qp->qp_num());
      }
      CHECK_EQ(qp->state(), QpState::Error);
      CHECK_NO_WC(*node.send_cq, "send CQ after the flush");
      CHECK_NO_WC(*node.recv_cq, "recv CQ after the flush");
      signal(env, "flushed");
      env.barrier("done");
    }
  }));
}

// set_error() flushes outstanding SENDs (held by RNR: the peer posts no
// receive, with a long RNR window) and posted receives, at once.
TEST_P(Conformance, SetErrorFlushesOutstandingWork) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    Node node(env);
    ConnectOptions long_rnr;
    long_rnr.rnr_timeout = 60s;
    if (env.rank() == kTarget) {
      auto qp = connected_qp(env, node, kInitiator, "t", {}, long_rnr);  // never posts a receive
      await(env, "flushed");
      env.barrier("done");
    } else {
      Buffer buf(4096);
      auto mr = node.pd->register_memory(buf.data(), buf.size(), Access::LocalWrite);
      auto qp = make_qp(node);
      for (std::uint64_t i = 0; i < 2; ++i) {
        Sge sge = mr->sge(1024 * i, 1024);
        qp->post_recv(RecvWr{.wr_id = 50 + i, .sg_list = {&sge, 1}});
      }
      connect_qp(env, *qp, kTarget, "t", long_rnr);
      for (std::uint64_t i = 0; i < 3; ++i) {
        Sge sge = mr->sge(2048, 100);
        qp->post_send(send_wr(1 + i, Opcode::Send, {&sge, 1}));
      }
      CHECK_NO_WC(*node.send_cq, "SENDs to a peer without receives (RNR window 60 s)");
      auto start = Clock::now();
      qp->set_error("flush test: set_error by the test");
      CHECK_EQ(qp->state(), QpState::Error);
      CHECK(qp->error_reason().find("flush test: set_error by the test") != std::string::npos)
          << "error_reason() must carry set_error's reason: \"" << qp->error_reason() << "\"";
      auto wcs = WAIT_WCS(*node.send_cq, 3, "flushed SENDs");
      for (std::uint64_t i = 0; i < 3; ++i) {
        CHECK_WC(wcs[i], "SEND flushed by set_error", .wr_id = 1 + i, .status = WcStatus::WrFlushErr,
                 .qp_num = qp->qp_num());
      }
      auto rwcs = WAIT_WCS(*node.recv_cq, 2, "flushed receives");
      for (std::uint64_t i = 0; i < 2; ++i) {
        CHECK_WC(rwcs[i], "receive flushed by set_error", .wr_id = 50 + i, .status = WcStatus::WrFlushErr,
                 .qp_num = qp->qp_num());
      }
      CHECK_LT(ms_since(start), 5000) << "flushing must not wait for the RNR window";
      signal(env, "flushed");
      env.barrier("done");
    }
  }));
}

// RNR: a SEND that finds no receive is retried; the receiver posts one after
// the sender says it has sent, within the (long) RNR window.
TEST_P(Conformance, RnrRetrySucceedsWhenReceiveIsPostedInTime) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    Node node(env);
    ConnectOptions opts;
    opts.rnr_timeout = 10s;
    Buffer buf(4096);
    auto mr = node.pd->register_memory(buf.data(), buf.size(), Access::LocalWrite);
    if (env.rank() == kTarget) {
      auto qp = connected_qp(env, node, kInitiator, "t", {}, opts);
      await(env, "sent");
      Sge sge = mr->sge(0, 4096);
      qp->post_recv(RecvWr{.wr_id = 5, .sg_list = {&sge, 1}});
      CHECK_WC(WAIT_WC(*node.recv_cq, "the late receive"), "receive posted after the SEND", .wr_id = 5,
               .status = WcStatus::Success, .opcode = WcOpcode::Recv, .byte_len = 777);
      CHECK_PATTERN(buf.data(), 777, 101, 0, "payload delivered after RNR");
      env.barrier("done");
    } else {
      fill_pattern(buf.data(), 777, 101);
      auto qp = connected_qp(env, node, kTarget, "t", {}, opts);
      Sge sge = mr->sge(0, 777);
      qp->post_send(send_wr(6, Opcode::Send, {&sge, 1}));
      signal(env, "sent");
      CHECK_WC(WAIT_WC(*node.send_cq, "the SEND"), "SEND that waited for a receive", .wr_id = 6,
               .status = WcStatus::Success, .opcode = WcOpcode::Send);
      env.barrier("done");
    }
  }));
}

// RNR retry exhausted: with no receive ever posted the SEND fails with
// RNR_RETRY_EXC_ERR after the RNR window (RDMX_RNR_TIMEOUT, not earlier), the
// QP goes to ERROR and the SEND behind it is flushed.
TEST_P(Conformance, RnrRetryExceeded) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    Node node(env);
    Buffer buf(4096);
    auto mr = node.pd->register_memory(buf.data(), buf.size(), Access::LocalWrite);
    if (env.rank() == kTarget) {
      auto qp = connected_qp(env, node, kInitiator, "t");  // never posts a receive
      await(env, "finished");
      env.barrier("done");
    } else {
      const auto window = rdmx::core::rnr_timeout();    // RDMX_RNR_TIMEOUT (500ms under ctest)
      auto qp = connected_qp(env, node, kTarget, "t");  // default: the RDMX_RNR_TIMEOUT window
      Sge sge = mr->sge(0, 64);
      auto start = Clock::now();
      qp->post_send(send_wr(1, Opcode::Send, {&sge, 1}));
      qp->post_send(send_wr(2, Opcode::Send, {&sge, 1}));
      auto wcs = WAIT_WCS(*node.send_cq, 2, "SENDs nobody receives");
      auto elapsed = ms_since(start);
      CHECK_WC(wcs[0], "SEND without a receive", .wr_id = 1, .status = WcStatus::RnrRetryExcErr,
               .qp_num = qp->qp_num());
      CHECK_WC(wcs[1], "SEND behind it", .wr_id = 2, .status = WcStatus::WrFlushErr, .qp_num = qp->qp_num());
      CHECK_GE(elapsed, window.count() * 9 / 10)
          << "RNR_RETRY_EXC_ERR came before the RNR window of " << window.count() << " ms";
      CHECK_LE(elapsed, window.count() + 5000)
          << "RNR_RETRY_EXC_ERR came long after the RNR window of " << window.count() << " ms";
      CHECK_EQ(qp->state(), QpState::Error);
      signal(env, "finished");
      env.barrier("done");
    }
  }));
}

// Unsignaled WRs produce no completion when they succeed; a later signaled WR
// completes alone; an unsignaled WR that fails still completes.
TEST_P(Conformance, UnsignaledSuccessIsSilentErrorsAreNot) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    Node node(env);
    if (env.rank() == kTarget) {
      Buffer target(65536);
      auto mr = node.pd->register_memory(target.data(), target.size(),
                                         Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead);
      auto qp = connected_qp(env, node, kInitiator, "t");
      publish_region(env, "region", *mr);
      await(env, "written");
      for (int i = 0; i < 5; ++i) {
        CHECK_PATTERN(target.data() + 4096 * i, 4096, 110 + static_cast<std::uint64_t>(i), 0,
                      "unsignaled WRITE #" + std::to_string(i));
      }
      env.barrier("done");
    } else {
      Buffer local(65536);
      auto mr = node.pd->register_memory(local.data(), local.size(), Access::LocalWrite);
      auto qp = connected_qp(env, node, kTarget, "t");
      RemoteRegion r = fetch_region(env, "region");
      for (int i = 0; i < 5; ++i) {
        fill_pattern(local.data() + 4096 * i, 4096, 110 + static_cast<std::uint64_t>(i));
        Sge sge = mr->sge(4096 * static_cast<std::size_t>(i), 4096);
        qp->post_send(rdma_wr(10 + static_cast<std::uint64_t>(i), Opcode::RdmaWrite, {&sge, 1},
                              r.addr + 4096 * static_cast<std::size_t>(i), r.rkey, /*signaled=*/false));
      }
      Sge rd = mr->sge(32768, 4096);
      qp->post_send(rdma_wr(20, Opcode::RdmaRead, {&rd, 1}, r.addr + 4096, r.rkey, /*signaled=*/true));
      CHECK_WC(WAIT_WC(*node.send_cq, "the signaled READ"), "the only completion after 5 unsignaled WRITEs",
               .wr_id = 20, .status = WcStatus::Success, .opcode = WcOpcode::RdmaRead, .byte_len = 4096);
      CHECK_PATTERN(local.data() + 32768, 4096, 111, 0, "READ behind unsignaled WRITEs");
      CHECK_NO_WC(*node.send_cq, "after the signaled READ (unsignaled successes must stay silent)");
      signal(env, "written");
      // An unsignaled WRITE with a bad rkey still completes, with its error.
      Sge sge = mr->sge(0, 64);
      qp->post_send(rdma_wr(30, Opcode::RdmaWrite, {&sge, 1}, r.addr, r.rkey ^ 0x1111u, /*signaled=*/false));
      CHECK_WC(WAIT_WC(*node.send_cq, "the failing unsignaled WRITE"), "unsignaled WRITE with a bad rkey", .wr_id = 30,
               .status = WcStatus::RemAccessErr, .qp_num = qp->qp_num());
      env.barrier("done");
    }
  }));
}

}  // namespace
}  // namespace rdmx::test
