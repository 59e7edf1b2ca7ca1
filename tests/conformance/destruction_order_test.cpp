// SPDX-License-Identifier: MIT
// Destruction order: IB refuses to destroy a device, PD or CQ while children
// live (EBUSY); rdmx::destroy() refuses the same, naming them, and a parent
// destroyed first anyway (a destructor cannot refuse) stays valid under its
// children, never undefined.
#include <cstring>

#include "conformance/conformance.hpp"

namespace rdmx::test {
namespace {

std::string live(const LiveChildren& children) { return children.to_string(); }

TEST_P(HostMemoryConformance, DestroyRefusesWhileChildrenLive) {
  ASSERT_TRUE(run(1, [](RankEnv& env) {
    std::shared_ptr<Device> device = open_device(env.provider());
    auto pd = device->alloc_pd();
    auto cq = device->create_cq(16);
    Buffer buf(4096);
    auto mr = pd->register_memory(buf.data(), buf.size(), Access::LocalWrite);
    auto qp = make_qp(*device, *pd, *cq, *cq);
    CHECK_EQ(live(device->live_children()), "1 protection domain, 1 completion queue, 1 queue pair");
    CHECK_EQ(live(pd->live_children()), "1 queue pair, 1 memory region");
    CHECK_EQ(live(cq->live_children()), "1 queue pair") << "a QP whose send and receive CQ are one counts once";

    auto err = EXPECT_RDMX_ERROR(ErrorCode::InvalidState, destroy(pd));
    CHECK(err.message().find("protection domain") != std::string::npos) << err.what();
    CHECK(err.message().find("1 queue pair, 1 memory region") != std::string::npos) << err.what();
    CHECK(pd != nullptr) << "a refused destroy() leaves the PD as it was";
    err = EXPECT_RDMX_ERROR(ErrorCode::InvalidState, destroy(cq));
    CHECK(err.message().find("completion queue while 1 queue pair") != std::string::npos) << err.what();
    CHECK(cq != nullptr);
    err = EXPECT_RDMX_ERROR(ErrorCode::InvalidState, destroy(device));
    CHECK(err.message().find("1 protection domain, 1 completion queue, 1 queue pair") != std::string::npos)
        << err.what();
    CHECK(device != nullptr);

    // The objects still work after the refusals.
    Sge sge = mr->sge(0, 64);
    qp->post_recv(RecvWr{.wr_id = 7, .sg_list = {&sge, 1}});

    qp.reset();
    CHECK_EQ(live(cq->live_children()), "none");
    destroy(cq);
    CHECK(cq == nullptr);
    err = EXPECT_RDMX_ERROR(ErrorCode::InvalidState, destroy(pd));
    CHECK(err.message().find("while 1 memory region") != std::string::npos) << err.what();
    mr.reset();
    destroy(pd);
    CHECK(pd == nullptr);
    CHECK_EQ(live(device->live_children()), "none");
    destroy(device);
    CHECK(device == nullptr);
  }));
}

// Parents destroyed before their children, as IB would refuse: the QP and
// region keep working, and tearing the rest down is clean.
TEST_P(HostMemoryConformance, ParentsDestroyedFirstStayValidUnderChildren) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    constexpr std::size_t kBytes = 4096;
    if (env.rank() == kTarget) {
      Node node(env);
      Buffer target(kBytes);
      std::memset(target.data(), 0, kBytes);
      auto mr = node.pd->register_memory(target.data(), kBytes, Access::LocalWrite | Access::RemoteWrite);
      auto qp = connected_qp(env, node, kInitiator, "t");
      publish_region(env, "region", *mr);
      await(env, "written");
      CHECK_PATTERN(target.data(), kBytes, 17, 0, "a WRITE from a QP whose device and PD were destroyed");
      env.barrier("done");
      return;
    }
    std::shared_ptr<Device> device = open_device(env.provider());
    auto pd = device->alloc_pd();
    auto cq = device->create_cq(64);
    Buffer local(kBytes);
    fill_pattern(local.data(), kBytes, 17);
    auto mr = pd->register_memory(local.data(), kBytes, Access::LocalWrite);
    auto qp = make_qp(*device, *pd, *cq, *cq);
    connect_qp(env, *qp, kTarget, "t");
    RemoteRegion region = fetch_region(env, "region");

    device.reset();
    pd.reset();
    Sge sge = mr->sge(0, kBytes);
    qp->post_send(rdma_wr(1, Opcode::RdmaWrite, {&sge, 1}, region.addr, region.rkey));
    auto wc = WAIT_WC(*cq, "WRITE after its device and PD were destroyed");
    CHECK_WC(wc, "WRITE after its device and PD were destroyed", .wr_id = 1, .status = WcStatus::Success,
             .qp_num = qp->qp_num());
    signal(env, "written");

    cq.reset();
    qp->post_send(rdma_wr(2, Opcode::RdmaWrite, {&sge, 1}, region.addr, region.rkey));
    qp.reset();
    mr.reset();
    env.barrier("done");
  }));
}

}  // namespace
}  // namespace rdmx::test
