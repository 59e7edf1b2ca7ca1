// SPDX-License-Identifier: MIT
// The verbs provider against whatever RDMA devices this machine has. Without
// one (CI's host), opening it must fail with an error that says so and what to
// do; with one (the soft-RoCE guest of scripts/rxe-vm.sh, or a host with an
// HCA), the device, its addressing and the settings that steer it are checked.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "rdmx/info.hpp"
#include "rdmx/verbs.hpp"
#include "support/harness.hpp"
#include "support/verbs_util.hpp"

namespace rdmx::test {
namespace {

// Each case runs in a forked child: settings are read once per process, and
// the parent must stay single-threaded for the harness.
::testing::AssertionResult in_child(const std::function<void(RankEnv&)>& body) {
  return run_ranks(1, Placement::Local, body, Options{.provider = "verbs"});
}

TEST(VerbsWithoutDevice, OpeningFailsClearlyNotWithACrash) {
  if (has_rdma_device()) GTEST_SKIP() << "this host has an RDMA device";
  ASSERT_TRUE(in_child([](RankEnv&) {
    ::setenv("RDMX_PROVIDER", "verbs", 1);
    try {
      open_device();
      FAIL_RANK() << "RDMX_PROVIDER=verbs opened a device on a host without one";
    } catch (const Error& e) {
      const std::string what = e.what();
      CHECK_EQ(e.code(), ErrorCode::NotFound) << what;
      CHECK(what.find("no RDMA device") != std::string::npos) << what;
      CHECK(what.find("op=open_device verbs") != std::string::npos) << what;
      CHECK(what.find("RDMX_PROVIDER=tcp") != std::string::npos) << what;
      CHECK(what.find("rdma_rxe") != std::string::npos) << what;
    }
  }));
}

TEST(VerbsWithoutDevice, AutoLeavesItOutAndSaysWhy) {
  if (has_rdma_device()) GTEST_SKIP() << "this host has an RDMA device";
  ASSERT_TRUE(in_child([](RankEnv&) {
    auto device = open_device("auto");
    CHECK(device->selection_reason().find("verbs left out: no RDMA device") != std::string::npos)
        << device->selection_reason();
    bool listed = false;
    for (const auto& p : probe_providers()) {
      if (p.name != "verbs") continue;
      listed = true;
      CHECK(p.built);
      CHECK(!p.usable);
      CHECK(p.reason.find("no RDMA device") != std::string::npos) << p.reason;
    }
    CHECK(listed) << "probe_providers() must list verbs";
  }));
}

TEST(VerbsDevice, OpensAnActivePortWithRoceV2Ipv4GidByDefault) {
  if (!has_rdma_device()) GTEST_SKIP() << "no RDMA device here (the soft-RoCE guest runs this)";
  ASSERT_TRUE(in_child([](RankEnv&) {
    auto device = open_device("verbs");
    CHECK_EQ(device->provider(), "verbs");
    const std::string why = device->selection_reason();
    // The guest's rxe0 has a link-local GID (index 0) and an IPv4 one (index 1).
    if (device->name().find("rxe") != std::string::npos) {
      CHECK(why.find("RoCE v2 with an IPv4 address, preferred") != std::string::npos) << why;
      CHECK(device->name().find("::ffff:") != std::string::npos) << device->name();
    }
    const DeviceCaps caps = device->caps();
    CHECK(caps.remote_peers && caps.same_host_peers && caps.auto_progress);
    CHECK_GE(caps.max_msg_size, 1ull << 30);
    // Whether the NIC takes GPU memory (dma-buf regions) is probed, and said.
    const std::size_t said = why.find("; device memory: ");
    CHECK(said != std::string::npos) << why;
    if (said != std::string::npos) {
      const bool dma_buf = why.compare(said + 17, 8, "dma-buf:") == 0;
      CHECK_EQ(caps.cuda_memory == CudaMemorySupport::DmaBuf, dma_buf) << why;
      if (!dma_buf) {
        CHECK_EQ(why.compare(said + 17, 5, "none:"), 0) << why;
      }
    }
  }));
}

TEST(VerbsDevice, GidIndexSettingIsObeyedAndABadOneListsTheTable) {
  if (!has_rdma_device()) GTEST_SKIP() << "no RDMA device here (the soft-RoCE guest runs this)";
  ASSERT_TRUE(in_child([](RankEnv&) {
    ::setenv("RDMX_IB_GID_INDEX", "0", 1);
    auto device = open_device("verbs");
    CHECK(device->selection_reason().find("RDMX_IB_GID_INDEX=0") != std::string::npos) << device->selection_reason();
  }));
  ASSERT_TRUE(in_child([](RankEnv&) {
    ::setenv("RDMX_IB_GID_INDEX", "97", 1);
    try {
      open_device("verbs");
      FAIL_RANK() << "RDMX_IB_GID_INDEX=97 was accepted";
    } catch (const Error& e) {
      const std::string what = e.what();
      CHECK(what.find("RDMX_IB_GID_INDEX=97 names no valid GID") != std::string::npos) << what;
      CHECK(what.find("GIDs: 0: ") != std::string::npos) << "the error must list the table: " << what;
      CHECK(what.find("RoCE v2") != std::string::npos) << what;
    }
  }));
}

TEST(VerbsDevice, HcaSettingThatExcludesEveryDeviceSaysSo) {
  if (!has_rdma_device()) GTEST_SKIP() << "no RDMA device here (the soft-RoCE guest runs this)";
  ASSERT_TRUE(in_child([](RankEnv&) {
    ::setenv("RDMX_IB_HCA", "=no_such_hca", 1);
    try {
      open_device("verbs");
      FAIL_RANK() << "RDMX_IB_HCA=no_such_hca opened a device";
    } catch (const Error& e) {
      const std::string what = e.what();
      CHECK_EQ(e.code(), ErrorCode::NotFound) << what;
      CHECK(what.find("excluded by RDMX_IB_HCA==no_such_hca") != std::string::npos) << what;
    }
  }));
}

}  // namespace
}  // namespace rdmx::test
