// SPDX-License-Identifier: MIT
// A QP left idle for longer than RDMX_TIMEOUT is still healthy: a provider's
// liveness check must time a peer's silence from when work is outstanding,
// not from the QP's last traffic (the collectives' communicators keep QPs to
// every peer and use some of them rarely).
#include <chrono>
#include <thread>

#include "conformance/conformance.hpp"
#include "services/config.hpp"

namespace rdmx::test {
namespace {

using namespace std::chrono_literals;

TEST_P(HostMemoryConformance, IdleLongerThanTimeoutThenWork) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    // Before the first rdmx call of this child: the setting is read once.
    ::setenv("RDMX_TIMEOUT", "3", 1);
    CHECK_EQ(core::timeout(), 3000ms) << "RDMX_TIMEOUT was read before the rank body set it";
    const auto idle = core::timeout() + 700ms;
    Node node(env);
    if (env.rank() == 0) {
      Buffer target(4096);
      auto mr = node.pd->register_memory(target.data(), target.size(), Access::LocalWrite | Access::RemoteWrite);
      auto qp = connected_qp(env, node, 1, "q");
      publish_region(env, "region", *mr);
      env.store().get("written", std::chrono::seconds(60));  // longer than RDMX_TIMEOUT on purpose
      CHECK_PATTERN(target.data(), 64, 7, 0, "first WRITE");
      CHECK_PATTERN(target.data() + 64, 64, 8, 0, "WRITE after the idle period");
    } else {
      Buffer local(128);
      fill_pattern(local.data(), 64, 7);
      fill_pattern(local.data() + 64, 64, 8);
      auto mr = node.pd->register_memory(local.data(), local.size(), Access::LocalWrite);
      auto qp = connected_qp(env, node, 0, "q");
      RemoteRegion r = fetch_region(env, "region");
      auto first = RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, mr->sge(0, 64), r.addr, r.rkey, 1);
      CHECK_WC(first, "WRITE before the idle period", .wr_id = 1, .status = WcStatus::Success);
      // The condition under test is the idleness itself, not a synchronisation.
      std::this_thread::sleep_for(idle);
      auto second = RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, mr->sge(64, 64), r.addr + 64, r.rkey, 2);
      CHECK_WC(second, "WRITE after the QP was idle for longer than RDMX_TIMEOUT", .wr_id = 2,
               .status = WcStatus::Success);
      env.store().set("written", std::string_view("1"));
    }
  }));
}

}  // namespace
}  // namespace rdmx::test
