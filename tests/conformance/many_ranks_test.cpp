// SPDX-License-Identifier: MIT
// Eight ranks on a machine with fewer cores: a full mesh of QPs where every
// rank WRITEs into every other and then SENDs it a notice. Oversubscribed
// ranks must neither livelock nor starve (the providers spin briefly, then
// block), and the run is bounded by the harness deadline.
#include <string>
#include <vector>

#include "conformance/conformance.hpp"

namespace rdmx::test {
namespace {

TEST_P(Conformance, EightRanksFullMeshOversubscribed) {
  ASSERT_TRUE(run(8, [](RankEnv& env) {
    constexpr std::size_t kSlot = 64 * 1024;
    const int n = env.world_size();
    const int me = env.rank();
    Node node(env);
    Buffer inbox(kSlot * static_cast<std::size_t>(n));
    Buffer outbox(kSlot + 64);
    auto in_mr = node.pd->register_memory(inbox.data(), inbox.size(), Access::LocalWrite | Access::RemoteWrite);
    auto out_mr = node.pd->register_memory(outbox.data(), outbox.size(), Access::LocalWrite);
    fill_pattern(outbox.data(), kSlot, 500 + static_cast<std::uint64_t>(me));
    std::vector<std::unique_ptr<QueuePair>> qps(static_cast<std::size_t>(n));
    for (int peer = 0; peer < n; ++peer) {
      if (peer == me) continue;
      qps[static_cast<std::size_t>(peer)] = make_qp(node);
      Sge note = in_mr->sge(0, 0);
      qps[static_cast<std::size_t>(peer)]->post_recv(
          RecvWr{.wr_id = static_cast<std::uint64_t>(peer), .sg_list = {&note, 1}});
    }
    for (int peer = 0; peer < n; ++peer) {
      if (peer != me) connect_qp(env, *qps[static_cast<std::size_t>(peer)], peer, "mesh");
    }
    publish_region(env, "inbox/" + std::to_string(me), *in_mr);
    Sge data = out_mr->sge(0, kSlot);
    for (int peer = 0; peer < n; ++peer) {
      if (peer == me) continue;
      RemoteRegion r = fetch_region(env, "inbox/" + std::to_string(peer));
      auto& qp = *qps[static_cast<std::size_t>(peer)];
      qp.post_send(rdma_wr(1, Opcode::RdmaWrite, {&data, 1}, r.addr + kSlot * static_cast<std::size_t>(me), r.rkey,
                           /*signaled=*/false));
      qp.post_send(send_wr(2, Opcode::Send, {}));  // ordered after the WRITE
    }
    auto sends = WAIT_WCS(*node.send_cq, static_cast<std::size_t>(n - 1), "notices to every peer");
    for (const auto& wc : sends) CHECK_WC(wc, "notice", .wr_id = 2, .status = WcStatus::Success);
    auto recvs = WAIT_WCS(*node.recv_cq, static_cast<std::size_t>(n - 1), "notices from every peer");
    for (const auto& wc : recvs) {
      CHECK_EQ(wc.status, WcStatus::Success) << describe(wc);
      const auto from = wc.wr_id;
      CHECK_PATTERN(inbox.data() + kSlot * from, kSlot, 500 + from, 0, "WRITE from rank " + std::to_string(from));
    }
    env.barrier("done");
  }));
}

}  // namespace
}  // namespace rdmx::test
