// SPDX-License-Identifier: MIT
// Local protection and length errors.
#include <cstring>

#include "conformance/conformance.hpp"

namespace rdmx::test {
namespace {

// Extra local memory a case registers (destroyed before the PD).
struct Extra {
  std::vector<std::unique_ptr<Buffer>> bufs;
  std::vector<std::unique_ptr<MemoryRegion>> mrs;
};
using MakeWr =
    std::function<SendWr(const RemoteRegion&, ProtectionDomain&, const MemoryRegion&, std::vector<Sge>&, Extra&)>;

// The initiator posts `make(...)`; it must complete with LOC_PROT_ERR, the
// QP goes to ERROR and the target's region is untouched. `after` checks the
// initiator's memory.
void local_prot_case(RankEnv& env, const MakeWr& make, const std::function<void(Extra&)>& after = {}) {
  Node node(env);
  if (env.rank() == kTarget) {
    Buffer target(8192);
    fill_pattern(target.data(), target.size(), 81);
    auto mr = node.pd->register_memory(target.data(), target.size(),
                                       Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead);
    auto qp = make_qp(node);
    Sge sge = mr->sge(0, 64);
    qp->post_recv(RecvWr{.wr_id = 1, .sg_list = {&sge, 1}});
    fill_pattern(target.data(), 64, 81);
    publish_region(env, "region", *mr);
    connect_qp(env, *qp, kInitiator, "t");
    await(env, "attack-done");
    CHECK_PATTERN(target.data(), target.size(), 81, 0, "target memory after a local protection error at the initiator");
    env.barrier("done");
  } else {
    Buffer local(8192);
    fill_pattern(local.data(), local.size(), 82);
    auto mr = node.pd->register_memory(local.data(), local.size(), Access::LocalWrite);
    Extra extra;
    auto qp = connected_qp(env, node, kTarget, "t");
    RemoteRegion region = fetch_region(env, "region");
    std::vector<Sge> sges;
    SendWr wr = make(region, *node.pd, *mr, sges, extra);
    wr.wr_id = 0x10C;
    qp->post_send(wr);
    auto wc = WAIT_WC(*node.send_cq, "completion of a WR with a bad local SGE");
    CHECK_WC(wc, std::string(to_string(wr.opcode)) + " with a bad local SGE", .wr_id = 0x10C,
             .status = WcStatus::LocProtErr, .qp_num = qp->qp_num());
    CHECK(eventually([&] { return qp->state() == QpState::Error; })) << "QP must move to ERROR after LOC_PROT_ERR";
    CHECK(!qp->error_reason().empty());
    if (after) after(extra);
    signal(env, "attack-done");
    env.barrier("done");
  }
}

TEST_P(Conformance, BadLkeyOnWrite) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    local_prot_case(env,
                    [](const RemoteRegion& r, ProtectionDomain&, const MemoryRegion& l, std::vector<Sge>& s, Extra&) {
                      Sge sge = l.sge(0, 64);
                      sge.lkey ^= 0x13579BDFu;
                      s = {sge};
                      return rdma_wr(0, Opcode::RdmaWrite, s, r.addr, r.rkey);
                    });
  }));
}

TEST_P(Conformance, BadLkeyOnSend) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    local_prot_case(env,
                    [](const RemoteRegion&, ProtectionDomain&, const MemoryRegion& l, std::vector<Sge>& s, Extra&) {
                      Sge good = l.sge(0, 16);
                      Sge bad = l.sge(16, 16);
                      bad.lkey ^= 0x13579BDFu;
                      s = {good, bad};  // the second SGE is the bad one
                      return send_wr(0, Opcode::Send, s);
                    });
  }));
}

TEST_P(Conformance, LocalSgeOutsideItsRegion) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    local_prot_case(env,
                    [](const RemoteRegion& r, ProtectionDomain&, const MemoryRegion& l, std::vector<Sge>& s, Extra&) {
                      Sge sge = l.sge(0, 64);
                      sge.addr = reinterpret_cast<std::uint64_t>(l.addr()) + l.length() - 32;  // 32 bytes past the end
                      s = {sge};
                      return rdma_wr(0, Opcode::RdmaWrite, s, r.addr, r.rkey);
                    });
  }));
}

TEST_P(Conformance, ReadIntoRegionWithoutLocalWrite) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    local_prot_case(
        env,
        [](const RemoteRegion& r, ProtectionDomain& pd, const MemoryRegion&, std::vector<Sge>& s, Extra& extra) {
          extra.bufs.push_back(std::make_unique<Buffer>(4096));
          set_bytes(extra.bufs[0]->data(), 0xEE, 4096);
          extra.mrs.push_back(pd.register_memory(extra.bufs[0]->data(), 4096, Access::None));
          s = {extra.mrs[0]->sge(0, 64)};
          return rdma_wr(0, Opcode::RdmaRead, s, r.addr, r.rkey);
        },
        [](Extra& extra) {
          CHECK_BYTES(extra.bufs[0]->data(), 4096, 0xEE, "region without LocalWrite after a READ into it");
        });
  }));
}

// SEND larger than the posted receive: LOC_LEN_ERR on the receive, REM_INV_REQ_ERR at the sender.
TEST_P(Conformance, SendLargerThanReceive) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    Node node(env);
    Buffer buf(4096);
    set_bytes(buf.data(), 0xEE, buf.size());
    auto mr = node.pd->register_memory(buf.data(), buf.size(), Access::LocalWrite);
    if (env.rank() == kTarget) {
      auto qp = make_qp(node);
      Sge a = mr->sge(0, 60), b = mr->sge(1000, 40);  // capacity 100
      Sge sges[] = {a, b};
      qp->post_recv(RecvWr{.wr_id = 0x1E, .sg_list = sges});
      connect_qp(env, *qp, kInitiator, "t");
      auto wc = WAIT_WC(*node.recv_cq, "the too-small receive");
      CHECK_WC(wc, "receive smaller than the SEND", .wr_id = 0x1E, .status = WcStatus::LocLenErr,
               .qp_num = qp->qp_num());
      CHECK(eventually([&] { return qp->state() == QpState::Error; }))
          << "receiver QP must move to ERROR after LOC_LEN_ERR; state " << to_string(qp->state());
      env.barrier("done");
      CHECK_BYTES(buf.data() + 60, 1000 - 60, 0xEE, "between the receive SGEs");
      CHECK_BYTES(buf.data() + 1040, 4096 - 1040, 0xEE, "after the receive SGEs");
    } else {
      auto qp = connected_qp(env, node, kTarget, "t");
      Sge sge = mr->sge(0, 101);
      qp->post_send(send_wr(0x5E, Opcode::Send, {&sge, 1}));
      auto wc = WAIT_WC(*node.send_cq, "the too-large send");
      CHECK_WC(wc, "SEND larger than the receive", .wr_id = 0x5E, .status = WcStatus::RemInvReqErr,
               .qp_num = qp->qp_num());
      CHECK(eventually([&] { return qp->state() == QpState::Error; }))
          << "sender QP must move to ERROR after REM_INV_REQ_ERR; state " << to_string(qp->state());
      env.barrier("done");
    }
  }));
}

}  // namespace
}  // namespace rdmx::test
