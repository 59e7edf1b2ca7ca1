// SPDX-License-Identifier: MIT
// shm's peer mapping (DeviceCaps::cuda_memory: peer-mapping): device memory
// (cuMemCreate memory exportable as a descriptor, or cudaMalloc memory
// through a legacy IPC handle) is offered to the peer once it first uses the
// rkey, and from then on the peer copies into and out of it itself, on the
// GPU's copy engine. A legacy import is closed before the exporter's
// deregistration returns: the simulated driver aborts a process that frees
// memory another process still has open. On the simulated driver the test also sees that the copies
// touched the other process's memory directly (a counter the simulated
// driver keeps; a real driver has none, and there the data checks stand alone).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "support/cuda_device.hpp"
#include "support/harness.hpp"
#include "support/verbs_util.hpp"

namespace rdmx {
namespace {

using namespace test;

constexpr Access kRemote = Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead;
constexpr std::uint32_t kPiece = 4096;
constexpr int kMappedPieces = 32;

long long peer_copies() { return simulated_driver_count("peer_copies"); }

std::vector<std::uint8_t> mapping_pattern(std::size_t n, std::uint64_t seed) {
  std::vector<std::uint8_t> bytes(n);
  fill_pattern(bytes.data(), n, seed);
  return bytes;
}

// Two shm ranks on this host, each with GPU 0's context current: body(env, node).
::testing::AssertionResult run_shm_pair(const std::function<void(RankEnv&, Node&)>& body) {
  Options options;
  options.provider = "shm";
  return run_ranks(
      2, Placement::Local,
      [&body](RankEnv& env) {
        std::string why;
        CHECK(cuda_for_test(&why) != nullptr) << why;
        Node node(env);
        body(env, node);
      },
      options);
}

TEST(ShmPeerMapping, ExportableDeviceMemoryIsCopiedByThePeerAfterItsFirstUse) {
  RDMX_REQUIRE_GPU_BEFORE_FORK();
  ASSERT_TRUE(run_shm_pair([](RankEnv& env, Node& node) {
    CHECK(node.device->caps().cuda_memory == CudaMemorySupport::PeerMapping);
    const std::size_t bytes = kPiece * kMappedPieces;
    if (env.rank() == 0) {
      VmmBuffer target;  // cuMemCreate memory, exportable as a descriptor
      auto mr = node.pd->register_memory(target.get(), bytes, kRemote);
      const auto before = mapping_pattern(bytes, 7);
      cuda_copy(target.get(), before.data(), bytes);
      auto qp = connected_qp(env, node, 1, "qp");
      publish_region(env, "target", *mr);
      await(env, "written");
      std::vector<std::uint8_t> got(bytes);
      cuda_copy(got.data(), target.get(), bytes);
      CHECK_PATTERN(got.data(), bytes / 2, 8, 0, "WRITEs from the peer's device memory");
      CHECK_PATTERN(got.data() + bytes / 2, bytes / 2, 9, 0, "WRITEs from the peer's host memory");
      mr.reset();  // deregistered while the peer has it open
      signal(env, "deregistered");
      env.barrier("done");
    } else {
      DeviceBuffer local_device(bytes);
      Buffer local_host(bytes);
      auto device_mr = node.pd->register_memory(local_device.get(), bytes, Access::LocalWrite);
      auto host_mr = node.pd->register_memory(local_host.data(), bytes, Access::LocalWrite);
      const auto from_device = mapping_pattern(bytes / 2, 8);
      cuda_copy(local_device.get(), from_device.data(), bytes / 2);
      fill_pattern(local_host.data() + bytes / 2, bytes / 2, 9);
      auto qp = connected_qp(env, node, 0, "qp");
      const RemoteRegion target = fetch_region(env, "target");
      std::uint64_t wr_id = 1;
      // READ first: the whole region, as the target filled it. Its
      // first use also makes the target offer the region.
      RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaRead, host_mr->sge(0, bytes), target.addr, target.rkey, wr_id++);
      CHECK_PATTERN(local_host.data(), bytes, 7, 0, "READ of the peer's device memory");
      fill_pattern(local_host.data() + bytes / 2, bytes / 2, 9);
      // The offer travels beside the ring: on the simulated driver, READ
      // 8 bytes until one is copied from the peer's memory directly.
      if (peer_copies() >= 0) {
        const long long start = peer_copies();
        for (int i = 0; i < 10000 && peer_copies() == start; ++i) {
          RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaRead, host_mr->sge(0, 8), target.addr, target.rkey, wr_id++);
        }
        CHECK_GT(peer_copies(), start) << "the peer's device region was never copied directly";
      }
      const long long copies_before = peer_copies();
      // Then WRITEs piece by piece: device -> device for the first half, host -> device for the second.
      for (int i = 0; i < kMappedPieces; ++i) {
        const std::uint32_t at = static_cast<std::uint32_t>(i) * kPiece;
        const Sge from = at < bytes / 2 ? device_mr->sge(at, kPiece) : host_mr->sge(at, kPiece);
        auto wc = RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, from, target.addr + at, target.rkey, wr_id);
        CHECK_WC(wc, "WRITE into the peer's device memory", .wr_id = wr_id, .status = WcStatus::Success);
        ++wr_id;
      }
      // READ device <- peer device, once mapped.
      RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaRead, device_mr->sge(0, kPiece), target.addr, target.rkey, wr_id++);
      std::vector<std::uint8_t> got(kPiece);
      cuda_copy(got.data(), local_device.get(), kPiece);
      CHECK_PATTERN(got.data(), kPiece, 8, 0, "READ device <- the peer's device memory");
      const long long copies_after = peer_copies();
      if (copies_before >= 0) {
        CHECK_GE(copies_after - copies_before, kMappedPieces + 1)
            << "WRITEs and READs on the mapped region did not copy the peer's memory directly";
      }
      // A WRITE past the region is refused by the target, mapped or not.
      auto outside = RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, host_mr->sge(0, 16), target.addr + bytes - 8,
                               target.rkey, 500);
      CHECK_WC(outside, "WRITE past the peer's device region", .wr_id = 500, .status = WcStatus::RemAccessErr);
      signal(env, "written");
      await(env, "deregistered");
      env.barrier("done");
    }
  }));
}

// After deregistration the peer's mapping is dropped: a WRITE with the old
// rkey is refused, as any access to a deregistered region.
TEST(ShmPeerMapping, ADeregisteredDeviceRegionRefusesThePeerThatMappedIt) {
  RDMX_REQUIRE_GPU_BEFORE_FORK();
  ASSERT_TRUE(run_shm_pair([](RankEnv& env, Node& node) {
    if (env.rank() == 0) {
      VmmBuffer target;
      auto mr = node.pd->register_memory(target.get(), kPiece, kRemote);
      auto qp = connected_qp(env, node, 1, "qp");
      publish_region(env, "target", *mr);
      await(env, "mapped");
      mr.reset();
      signal(env, "deregistered");
      env.barrier("done");
    } else {
      Buffer local(kPiece);
      auto mr = node.pd->register_memory(local.data(), kPiece, Access::LocalWrite);
      auto qp = connected_qp(env, node, 0, "qp");
      const RemoteRegion target = fetch_region(env, "target");
      // WRITEs until one is copied directly (on the simulated driver; a few on a real one).
      const long long start = peer_copies();
      for (std::uint64_t i = 0; i < 10000; ++i) {
        CHECK_WC(RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, mr->sge(0, 64), target.addr, target.rkey, i),
                 "WRITE while registered", .wr_id = i, .status = WcStatus::Success);
        if (start < 0 ? i >= 16 : peer_copies() > start) break;
      }
      if (start >= 0) {
        CHECK_GT(peer_copies(), start) << "the region was never mapped";
      }
      signal(env, "mapped");
      await(env, "deregistered");
      auto stale = RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, mr->sge(0, 64), target.addr, target.rkey, 9);
      CHECK_WC(stale, "WRITE after deregistration", .wr_id = 9, .status = WcStatus::RemAccessErr);
      env.barrier("done");
    }
  }));
}

// WRITEs with `mr` into `target` until one is copied into the peer's memory
// directly (on the simulated driver; a few on a real one).
void write_until_mapped(Node& node, QueuePair& qp, MemoryRegion& mr, const RemoteRegion& target) {
  const long long start = peer_copies();
  for (std::uint64_t i = 0; i < 10000; ++i) {
    CHECK_WC(RDMA_SYNC(qp, *node.send_cq, Opcode::RdmaWrite, mr.sge(0, 64), target.addr, target.rkey, i),
             "WRITE while registered", .wr_id = i, .status = WcStatus::Success);
    if (start < 0 ? i >= 16 : peer_copies() > start) break;
  }
  if (start >= 0) {
    CHECK_GT(peer_copies(), start) << "the region was never mapped";
  }
}

// cudaMalloc memory: the peer opens it through a legacy IPC handle, and has
// closed it by the time deregistration returns, so the memory may be freed
// at once (the simulated driver would abort the free otherwise).
TEST(ShmPeerMapping, CudaMallocMemoryIsClosedByThePeerBeforeDeregistrationReturns) {
  RDMX_REQUIRE_GPU_BEFORE_FORK();
  ASSERT_TRUE(run_shm_pair([](RankEnv& env, Node& node) {
    if (env.rank() == 0) {
      auto target = std::make_unique<DeviceBuffer>(kPiece);
      auto mr = node.pd->register_memory(target->get(), kPiece, kRemote);
      auto qp = connected_qp(env, node, 1, "qp");
      publish_region(env, "target", *mr);
      await(env, "mapped");
      std::vector<std::uint8_t> got(64);
      cuda_copy(got.data(), target->get(), got.size());
      CHECK_PATTERN(got.data(), got.size(), 3, 0, "WRITEs from the peer, the last of them copied directly");
      mr.reset();
      target.reset();  // freed while the peer's QP lives on
      signal(env, "freed");
      env.barrier("done");
    } else {
      Buffer local(kPiece);
      fill_pattern(local.data(), kPiece, 3);
      auto mr = node.pd->register_memory(local.data(), kPiece, Access::LocalWrite);
      auto qp = connected_qp(env, node, 0, "qp");
      const RemoteRegion target = fetch_region(env, "target");
      write_until_mapped(node, *qp, *mr, target);
      signal(env, "mapped");
      await(env, "freed");
      auto stale = RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, mr->sge(0, 64), target.addr, target.rkey, 9);
      CHECK_WC(stale, "WRITE after deregistration", .wr_id = 9, .status = WcStatus::RemAccessErr);
      env.barrier("done");
    }
  }));
}

// A peer killed while it has the memory open cannot close it, but its
// imports died with it: deregistration sees the process gone and does not
// wait for RDMX_TIMEOUT.
TEST(ShmPeerMapping, DeregistrationDoesNotWaitForAKilledPeersImport) {
  RDMX_REQUIRE_GPU_BEFORE_FORK();
  Options options;
  options.provider = "shm";
  options.may_be_killed = {1};
  ASSERT_TRUE(run_ranks(
      2, Placement::Local,
      [](RankEnv& env) {
        std::string why;
        CHECK(cuda_for_test(&why) != nullptr) << why;
        Node node(env);
        if (env.rank() == 1) {
          Buffer local(kPiece);
          auto mr = node.pd->register_memory(local.data(), kPiece, Access::LocalWrite);
          auto qp = connected_qp(env, node, 0, "qp");
          write_until_mapped(node, *qp, *mr, fetch_region(env, "target"));
          signal(env, "mapped");
          env.kill_self();
        }
        auto target = std::make_unique<DeviceBuffer>(kPiece);
        auto mr = node.pd->register_memory(target->get(), kPiece, kRemote);
        Buffer local(kPiece);
        auto local_mr = node.pd->register_memory(local.data(), kPiece, Access::LocalWrite);
        auto qp = connected_qp(env, node, 1, "qp");
        publish_region(env, "target", *mr);
        await(env, "mapped");
        // Our QP learns of the death when a SEND finds the peer gone.
        auto wc = RDMA_SYNC(*qp, *node.send_cq, Opcode::Send, local_mr->sge(0, 8), 0, 0, 1);
        CHECK(wc.status != WcStatus::Success) << "a SEND to a killed peer succeeded: " << describe(wc);
        const auto start = std::chrono::steady_clock::now();
        mr.reset();
        const auto took = std::chrono::steady_clock::now() - start;
        CHECK_LT(took, test::default_timeout() / 2) << "deregistration waited for a dead process's import";
        target.reset();
      },
      options));
}

}  // namespace
}  // namespace rdmx
