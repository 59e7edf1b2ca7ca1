// SPDX-License-Identifier: MIT
// Mixed MTUs: two ports whose MTUs differ must agree on the smaller one as
// the path MTU, or the side with the larger one sends packets the other
// refuses (IB requires every packet but a message's last to be exactly
// path-MTU long). The guest has one rxe0; its MTU follows its netdev's, so
// the first rank opens the device at 4096, the netdev's MTU is lowered, and
// the second rank opens it at 1024.
//
// Changes a network interface's MTU: runs only where RDMX_TEST_MAY_CHANGE_MTU=1
// (the soft-RoCE guest's scripts/verbs-guest-tests.sh), never on a real host.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "support/harness.hpp"
#include "support/verbs_util.hpp"
#include "topo/topo.hpp"

namespace rdmx::test {
namespace {

std::string rxe_netdev() {
  for (const auto& device : topo::scan_rdma_devices().devices) {
    if (device.name.rfind("rxe", 0) != 0 || device.ports.empty()) continue;
    std::ifstream in("/sys/class/infiniband/" + device.name + "/ports/1/gid_attrs/ndevs/0");
    std::string netdev;
    if (in >> netdev) return netdev;
  }
  return {};
}

int set_mtu(const std::string& netdev, int mtu) {
  return std::system(("ip link set dev " + netdev + " mtu " + std::to_string(mtu)).c_str());
}

int netdev_mtu(const std::string& netdev) {
  std::ifstream in("/sys/class/net/" + netdev + "/mtu");
  int mtu = 0;
  in >> mtu;
  return mtu;
}

// rxe's active MTU as the kernel reports it now, in bytes (0: no rxe).
int rxe_active_mtu() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  int bytes = 0;
  for (int i = 0; i < n && bytes == 0; ++i) {
    if (std::string(ibv_get_device_name(list[i])).rfind("rxe", 0) != 0) continue;
    if (ibv_context* ctx = ibv_open_device(list[i])) {
      ibv_port_attr attr{};
      if (ibv_query_port(ctx, 1, &attr) == 0) bytes = 128 << attr.active_mtu;
      ibv_close_device(ctx);
    }
  }
  if (list != nullptr) ibv_free_device_list(list);
  return bytes;
}

TEST(VerbsPathMtu, PortsWithDifferentMtusAgreeOnTheSmaller) {
  const char* allowed = std::getenv("RDMX_TEST_MAY_CHANGE_MTU");
  if (allowed == nullptr || std::string(allowed) != "1") {
    GTEST_SKIP() << "changes an interface's MTU: only in the soft-RoCE guest (RDMX_TEST_MAY_CHANGE_MTU=1)";
  }
  const std::string netdev = rxe_netdev();
  ASSERT_FALSE(netdev.empty()) << "no rxe device with a netdev";
  const int original = netdev_mtu(netdev);
  ASSERT_GE(original, 4200) << netdev << " must start with an MTU that gives rxe 4096";

  Options options;
  options.provider = "verbs";
  const bool ok = run_ranks(
      2, Placement::Local,
      [&](RankEnv& env) {
        constexpr std::size_t kLen = 64 * 1024;
        const int peer = 1 - env.rank();
        if (env.rank() == 1) await(env, "big-opened");
        Node node(env);
        const int mine = rxe_active_mtu();
        if (env.rank() == 0) {
          CHECK_EQ(mine, 4096);
          CHECK_EQ(set_mtu(netdev, 1500), 0);
          signal(env, "big-opened");
        } else {
          CHECK_EQ(mine, 1024) << "rxe follows " << netdev << "'s MTU of 1500";
        }
        Buffer mem(2 * kLen);
        auto mr = node.pd->register_memory(mem.data(), mem.size(),
                                           Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead);
        publish_region(env, "r" + std::to_string(env.rank()), *mr);
        auto qp = connected_qp(env, node, peer, "mtu");
        const RemoteRegion there = fetch_region(env, "r" + std::to_string(peer));
        // Each rank WRITEs 64 KiB (64 packets of 1024) into the other, then READs it back.
        fill_pattern(mem.data(), kLen, 40 + static_cast<std::uint64_t>(env.rank()));
        auto w = RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, mr->sge(0, kLen), there.addr + kLen, there.rkey, 1);
        CHECK_WC(w, "64 KiB WRITE across ports of different MTUs", .wr_id = 1, .status = WcStatus::Success);
        env.barrier("written");
        CHECK_PATTERN(mem.data() + kLen, kLen, 40 + static_cast<std::uint64_t>(peer), 0, "the peer's WRITE");
        std::memset(mem.data(), 0, kLen);
        auto r = RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaRead, mr->sge(0, kLen), there.addr + kLen, there.rkey, 2);
        CHECK_WC(r, "64 KiB READ across ports of different MTUs", .wr_id = 2, .status = WcStatus::Success);
        CHECK_PATTERN(mem.data(), kLen, 40 + static_cast<std::uint64_t>(env.rank()), 0,
                      "READ back what this rank wrote");
        env.barrier("done");
      },
      options);
  EXPECT_EQ(set_mtu(netdev, original), 0) << "restoring " << netdev << "'s MTU";
  EXPECT_TRUE(ok);
}

}  // namespace
}  // namespace rdmx::test
