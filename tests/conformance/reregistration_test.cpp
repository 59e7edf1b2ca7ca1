// SPDX-License-Identifier: MIT
// Registering a buffer that is already registered gives a second, working
// registration; destroying one leaves the other working; destroying both
// kills the keys.
#include <cstring>

#include "conformance/conformance.hpp"

namespace rdmx::test {
namespace {

TEST_P(Conformance, SameBufferRegisteredTwice) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    Node node(env);
    if (env.rank() == kTarget) {
      Buffer target(8192);
      set_bytes(target.data(), 0, target.size());
      const Access rights = Access::LocalWrite | Access::RemoteWrite;
      auto first = node.pd->register_memory(target.data(), target.size(), rights);
      auto second = node.pd->register_memory(target.data(), target.size(), rights);
      auto qp = connected_qp(env, node, kInitiator, "t");
      publish_region(env, "second", *second);
      first.reset();
      signal(env, "first-gone");
      await(env, "wrote-through-second");
      CHECK_PATTERN(target.data(), 512, 21, 0, "WRITE through the surviving registration");
      second.reset();
      signal(env, "both-gone");
      env.barrier("done");
      CHECK_BYTES(target.data() + 4096, 512, 0, "after both registrations were destroyed");
    } else {
      Buffer src(4096);
      fill_pattern(src.data(), 512, 21);
      auto mr = node.pd->register_memory(src.data(), src.size(), Access::LocalWrite);
      auto qp = connected_qp(env, node, kTarget, "t");
      RemoteRegion r = fetch_region(env, "second");
      await(env, "first-gone");
      auto ok = RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, mr->sge(0, 512), r.addr, r.rkey, 1);
      CHECK_WC(ok, "WRITE with the second registration's rkey after the first was destroyed", .wr_id = 1,
               .status = WcStatus::Success);
      signal(env, "wrote-through-second");
      await(env, "both-gone");
      auto refused = RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, mr->sge(0, 512), r.addr + 4096, r.rkey, 2);
      CHECK_WC(refused, "WRITE after both registrations were destroyed", .wr_id = 2, .status = WcStatus::RemAccessErr);
      env.barrier("done");
    }
  }));
}

}  // namespace
}  // namespace rdmx::test
