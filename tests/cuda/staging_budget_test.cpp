// SPDX-License-Identifier: MIT
// Device requests far beyond the host memory their providers may use for
// them: with RDMX_CUDA_STAGING_BYTES at 1 MiB, 24 WRITEs of 768 KiB and one
// of 3 MiB from device memory (staged within the budget on shm, copied
// piece by piece as they are sent on tcp), a host WRITE queued behind them
// all, then as many READs into device memory (staged within the budget on
// both): requests waiting for room keep their order, a request larger than
// the budget goes alone, and every byte lands, copied through page-locked
// host memory only. On each provider that serves device memory
// (providers/soft_rc/staging.hpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "support/buffer.hpp"
#include "support/cuda_device.hpp"
#include "support/harness.hpp"
#include "support/providers.hpp"
#include "support/verbs_util.hpp"

namespace rdmx {
namespace {

using namespace test;

constexpr std::size_t kBudgetPiece = 768 << 10;  // each below the budget, two above it
constexpr int kBudgetPieces = 24;
constexpr std::size_t kLarge = 3 << 20;  // above the budget: staged alone
constexpr std::size_t kTargetBytes = kBudgetPieces * kBudgetPiece + kLarge + 4096;

class StagingBudget : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    if (!device_memory_served_in_child(GetParam(), &why)) GTEST_SKIP() << why;
  }
};

TEST_P(StagingBudget, ManyLargeDeviceWritesAndReadsStayInOrderAndAllLand) {
  Options options;
  options.provider = GetParam();
  ASSERT_TRUE(run_ranks(
      2, Placement::Local,
      [](RankEnv& env) {
        ::setenv("RDMX_CUDA_STAGING_BYTES", "1M", 1);
        Node node(env);
        Buffer target(kTargetBytes, BufferMemory::Device);
        if (env.rank() == 0) {
          auto mr = node.pd->register_memory(target.data(), target.size(),
                                             Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead);
          const long long pageable_before_writes = simulated_driver_count("pageable_copies");
          publish_region(env, "target", *mr);
          auto qp = connected_qp(env, node, 1, "qp");
          await(env, "written");
          CHECK_EQ(simulated_driver_count("pageable_copies"), pageable_before_writes)
              << "WRITEs landed in device memory through pageable host memory";
          for (int i = 0; i < kBudgetPieces; ++i) {
            CHECK_PATTERN(target.data() + kBudgetPiece * static_cast<std::size_t>(i), kBudgetPiece, 500 + i, 0,
                          "device WRITE #" + std::to_string(i));
          }
          CHECK_PATTERN(target.data() + kBudgetPieces * kBudgetPiece, kLarge, 499, 0,
                        "the WRITE larger than the budget");
          // The host WRITE queued behind them all went last: its word is the one that stayed.
          CHECK_BYTES(target.data() + kBudgetPieces * kBudgetPiece + kLarge, 8, 0x77,
                      "host WRITE queued behind device ones");
          const long long pageable_before_reads = simulated_driver_count("pageable_copies");
          signal(env, "checked");
          env.barrier("read");
          CHECK_EQ(simulated_driver_count("pageable_copies"), pageable_before_reads)
              << "READs were answered from device memory through pageable host memory";
          return;
        }
        Buffer source(kTargetBytes, BufferMemory::Device);
        Buffer host(4096, BufferMemory::Host);
        set_bytes(host.data(), 0x77, 8);
        for (int i = 0; i < kBudgetPieces; ++i) {
          fill_pattern(source.data() + kBudgetPiece * static_cast<std::size_t>(i), kBudgetPiece, 500 + i);
        }
        fill_pattern(source.data() + kBudgetPieces * kBudgetPiece, kLarge, 499);
        set_bytes(source.data() + kBudgetPieces * kBudgetPiece + kLarge, 0x11, 8);
        auto mr = node.pd->register_memory(source.data(), source.size(), Access::LocalWrite);
        auto host_mr = node.pd->register_memory(host.data(), host.size(), Access::LocalWrite);
        QpCaps caps;
        caps.max_send_wr = 64;
        auto qp = connected_qp(env, node, 0, "qp", caps);
        const RemoteRegion target_region = fetch_region(env, "target");
        std::uint64_t wr_id = 0;
        std::vector<Sge> sges;
        auto post = [&](const Sge& sge, std::uint64_t offset) {
          sges = {sge};
          qp->post_send(rdma_wr(wr_id++, Opcode::RdmaWrite, sges, target_region.addr + offset, target_region.rkey));
        };
        // Every copy between device memory and the providers' host buffers
        // goes through page-locked memory (counted by the simulated driver).
        const long long pageable_before = simulated_driver_count("pageable_copies");
        // The device word at the end first, then the host word over it: if
        // the host WRITE overtook the device ones waiting, 0x11 would stay.
        post(mr->sge(kBudgetPieces * kBudgetPiece + kLarge, 8), kBudgetPieces * kBudgetPiece + kLarge);
        for (int i = 0; i < kBudgetPieces; ++i) {
          const std::size_t at = kBudgetPiece * static_cast<std::size_t>(i);
          post(mr->sge(at, static_cast<std::uint32_t>(kBudgetPiece)), at);
        }
        post(mr->sge(kBudgetPieces * kBudgetPiece, static_cast<std::uint32_t>(kLarge)), kBudgetPieces * kBudgetPiece);
        post(host_mr->sge(0, 8), kBudgetPieces * kBudgetPiece + kLarge);
        const auto wcs = WAIT_WCS(*node.send_cq, static_cast<std::size_t>(wr_id), "the WRITEs");
        for (std::size_t i = 0; i < wcs.size(); ++i) {
          CHECK_WC(wcs[i], "WRITE #" + std::to_string(i), .wr_id = i, .status = WcStatus::Success);
        }
        signal(env, "written");
        await(env, "checked");
        // The same bytes read back, into a second device buffer.
        Buffer back(kTargetBytes, BufferMemory::Device);
        auto back_mr = node.pd->register_memory(back.data(), back.size(), Access::LocalWrite);
        const std::uint64_t first_read = wr_id;
        for (int i = 0; i < kBudgetPieces; ++i) {
          const std::size_t at = kBudgetPiece * static_cast<std::size_t>(i);
          sges = {back_mr->sge(at, static_cast<std::uint32_t>(kBudgetPiece))};
          qp->post_send(rdma_wr(wr_id++, Opcode::RdmaRead, sges, target_region.addr + at, target_region.rkey));
        }
        sges = {back_mr->sge(kBudgetPieces * kBudgetPiece, static_cast<std::uint32_t>(kLarge))};
        qp->post_send(rdma_wr(wr_id++, Opcode::RdmaRead, sges, target_region.addr + kBudgetPieces * kBudgetPiece,
                              target_region.rkey));
        const auto reads = WAIT_WCS(*node.send_cq, static_cast<std::size_t>(wr_id - first_read), "the READs");
        for (std::size_t i = 0; i < reads.size(); ++i) {
          CHECK_WC(reads[i], "READ #" + std::to_string(i), .wr_id = first_read + i, .status = WcStatus::Success);
        }
        CHECK_EQ(simulated_driver_count("pageable_copies"), pageable_before)
            << "device memory was copied to or from pageable host memory";
        for (int i = 0; i < kBudgetPieces; ++i) {
          CHECK_PATTERN(back.data() + kBudgetPiece * static_cast<std::size_t>(i), kBudgetPiece, 500 + i, 0,
                        "device READ #" + std::to_string(i));
        }
        CHECK_PATTERN(back.data() + kBudgetPieces * kBudgetPiece, kLarge, 499, 0, "the READ larger than the budget");
        env.barrier("read");
      },
      options));
}

INSTANTIATE_TEST_SUITE_P(Providers, StagingBudget, ::testing::ValuesIn(tested_providers()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace rdmx
