// SPDX-License-Identifier: MIT
// Ordering: a WRITE_WITH_IMM completion at the target means every earlier
// WRITE on the QP is visible; SENDs are received in the order they were
// posted; completions of one send queue come in posting order.
#include <atomic>
#include <chrono>
#include <cstring>
#include <vector>

#include "conformance/conformance.hpp"

namespace rdmx::test {
namespace {

TEST_P(Conformance, WriteWithImmOrdersPrecedingWrites) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    constexpr int kRounds = 8;
    constexpr std::size_t kChunk = 64 * 1024 + 3;  // odd, so chunks straddle pages and frames
    constexpr int kChunks = 128;                   // ~8 MiB per round
    constexpr std::size_t kRegion = kChunk * kChunks;
    Node node(env);
    if (env.rank() == kTarget) {
      Buffer target(kRegion);
      auto mr = node.pd->register_memory(target.data(), target.size(), Access::LocalWrite | Access::RemoteWrite);
      auto qp = make_qp(node);
      for (int r = 0; r < kRounds; ++r) qp->post_recv(RecvWr{.wr_id = static_cast<std::uint64_t>(r)});
      publish_region(env, "region", *mr);
      connect_qp(env, *qp, kInitiator, "t");
      for (int r = 0; r < kRounds; ++r) {
        auto wc = WAIT_WC(*node.recv_cq, "WRITE_WITH_IMM of round " + std::to_string(r));
        CHECK_WC(wc, "WRITE_WITH_IMM of round " + std::to_string(r), .wr_id = static_cast<std::uint64_t>(r),
                 .status = WcStatus::Success, .opcode = WcOpcode::RecvRdmaWithImm, .byte_len = kChunk, .with_imm = true,
                 .imm_data = static_cast<std::uint32_t>(0x1000 + r));
        // Checked at once: every chunk of this round must already be in place.
        CHECK_PATTERN(target.data(), kRegion, 500 + r, 0,
                      "region when round " + std::to_string(r) + "'s immediate arrived");
        signal(env, "checked/" + std::to_string(r));
      }
      env.barrier("done");
    } else {
      Buffer src(kRegion);
      auto mr = node.pd->register_memory(src.data(), src.size(), Access::LocalWrite);
      auto qp = connected_qp(env, node, kTarget, "t");
      RemoteRegion region = fetch_region(env, "region");
      for (int r = 0; r < kRounds; ++r) {
        if (r > 0) await(env, "checked/" + std::to_string(r - 1));  // the target is done reading
        fill_pattern(src.data(), kRegion, 500 + r);
        // Chunks in a scrambled order; the last one rides on the WRITE_WITH_IMM.
        std::vector<int> order;
        for (int c = 0; c < kChunks; ++c) order.push_back((c * 37 + r) % kChunks);
        for (int i = 0; i < kChunks; ++i) {
          std::size_t off = static_cast<std::size_t>(order[static_cast<std::size_t>(i)]) * kChunk;
          Sge sge = mr->sge(off, kChunk);
          bool last = i + 1 == kChunks;
          SendWr wr =
              rdma_wr(static_cast<std::uint64_t>(r * 1000 + i), last ? Opcode::RdmaWriteWithImm : Opcode::RdmaWrite,
                      {&sge, 1}, region.addr + off, region.rkey, /*signaled=*/last || i % 16 == 0);
          wr.imm_data = static_cast<std::uint32_t>(0x1000 + r);
          qp->post_send(wr);
        }
        // Signaled: every 16th and the last (9 per round), in posting order.
        auto wcs = WAIT_WCS(*node.send_cq, kChunks / 16 + 1, "round " + std::to_string(r));
        for (std::size_t k = 0; k + 1 < wcs.size(); ++k) {
          CHECK_WC(wcs[k], "signaled WRITE", .wr_id = static_cast<std::uint64_t>(r * 1000 + 16 * static_cast<int>(k)),
                   .status = WcStatus::Success, .opcode = WcOpcode::RdmaWrite);
        }
        CHECK_WC(wcs.back(), "WRITE_WITH_IMM", .wr_id = static_cast<std::uint64_t>(r * 1000 + kChunks - 1),
                 .status = WcStatus::Success, .opcode = WcOpcode::RdmaWrite);
      }
      env.barrier("done");
    }
  }));
}

// DeviceCaps::ordered_write_placement: a target that polls the last word of
// a WRITE and sees it changed finds every other byte of the WRITE in place,
// for WRITEs of one and several SGEs, small and large, into heap and into
// allocated (directly mapped) memory. Providers that do not claim it skip.
TEST_P(Conformance, OrderedWritePlacementWhenClaimed) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    Node node(env);
    if (!env.device().caps().ordered_write_placement) return;
    constexpr std::size_t kMax = 300 * 1024 + 8;
    const std::size_t sizes[] = {8, 16, 72, 4104, 64 * 1024, kMax};
    constexpr int kRounds = 40;
    for (bool allocated : {false, true}) {
      const std::string tag = allocated ? "alloc" : "heap";
      Buffer heap(kMax);
      std::unique_ptr<MemoryRegion> mr =
          allocated ? node.pd->allocate_memory(kMax, Access::LocalWrite | Access::RemoteWrite)
                    : node.pd->register_memory(heap.data(), kMax, Access::LocalWrite | Access::RemoteWrite);
      auto* base = static_cast<unsigned char*>(mr->addr());
      if (env.rank() == kTarget) {
        publish_region(env, "ordered/" + tag, *mr);
        auto qp = make_qp(node);
        connect_qp(env, *qp, kInitiator, "ordered-" + tag);
        for (int round = 0; round < kRounds; ++round) {
          const std::size_t size = sizes[static_cast<std::size_t>(round) % std::size(sizes)];
          const std::uint64_t mark = 0x5eed000000000000ull + static_cast<std::uint64_t>(round) + 1;
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
          while (load_u64(base + size - 8) != mark) {
            CHECK(std::chrono::steady_clock::now() < deadline) << tag << " round " << round << ": last word never came";
            env.device().progress();
          }
          std::vector<unsigned char> got(size - 8);
          copy_bytes(got.data(), base, size - 8);
          for (std::size_t i = 0; i + 8 < size; ++i) {
            const auto want = static_cast<unsigned char>((i * 131 + static_cast<std::size_t>(round) * 7) & 0xff);
            if (got[i] != want) {
              FAIL_RANK() << tag << " round " << round << " (" << size << " bytes): byte " << i
                          << " not yet in place when the last word was";
            }
          }
          signal(env, "ordered/" + tag + "/" + std::to_string(round));
        }
      } else {
        auto qp = connected_qp(env, node, kTarget, "ordered-" + tag);
        RemoteRegion region = fetch_region(env, "ordered/" + tag);
        Buffer src(kMax);
        auto src_mr = node.pd->register_memory(src.data(), kMax, Access::LocalWrite);
        for (int round = 0; round < kRounds; ++round) {
          const std::size_t size = sizes[static_cast<std::size_t>(round) % std::size(sizes)];
          std::vector<std::uint8_t> bytes(size);
          for (std::size_t i = 0; i + 8 < size; ++i) {
            bytes[i] = static_cast<std::uint8_t>((i * 131 + static_cast<std::size_t>(round) * 7) & 0xff);
          }
          const std::uint64_t mark = 0x5eed000000000000ull + static_cast<std::uint64_t>(round) + 1;
          std::memcpy(bytes.data() + size - 8, &mark, 8);
          copy_bytes(src.data(), bytes.data(), size);
          // Odd rounds: three SGEs that cut through the last word.
          std::vector<Sge> sges;
          if (round % 2 == 1 && size >= 16) {
            sges = {src_mr->sge(0, static_cast<std::uint32_t>(size - 12)), src_mr->sge(size - 12, 8),
                    src_mr->sge(size - 4, 4)};
          } else {
            sges = {src_mr->sge(0, static_cast<std::uint32_t>(size))};
          }
          qp->post_send(
              rdma_wr(static_cast<std::uint64_t>(round), Opcode::RdmaWrite, sges, region.addr, region.rkey, true));
          WAIT_WC(*node.send_cq, "ordered WRITE round " + std::to_string(round));
          await(env, "ordered/" + tag + "/" + std::to_string(round));
        }
      }
      env.barrier("ordered-done-" + tag);
    }
  }));
}

// 1000 SENDs of varying sizes arrive in order, each in the receive posted for it.
TEST_P(Conformance, SendsArriveInOrder) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    constexpr int kCount = 1000;
    constexpr std::size_t kSlot = 4096;
    auto size_of = [](int i) { return static_cast<std::uint32_t>(8 + (i * 37) % 4089); };
    Node node(env);
    Buffer buf(kSlot * kCount);
    auto mr = node.pd->register_memory(buf.data(), buf.size(), Access::LocalWrite);
    if (env.rank() == kTarget) {
      set_bytes(buf.data(), 0, buf.size());
      auto qp = make_qp(node);
      for (int i = 0; i < kCount; ++i) {
        Sge sge = mr->sge(kSlot * static_cast<std::size_t>(i), kSlot);
        qp->post_recv(RecvWr{.wr_id = static_cast<std::uint64_t>(i), .sg_list = {&sge, 1}});
      }
      connect_qp(env, *qp, kInitiator, "t");
      auto wcs = WAIT_WCS(*node.recv_cq, kCount, "1000 receives");
      for (int i = 0; i < kCount; ++i) {
        const auto& wc = wcs[static_cast<std::size_t>(i)];
        CHECK_WC(wc, "receive #" + std::to_string(i), .wr_id = static_cast<std::uint64_t>(i),
                 .status = WcStatus::Success, .opcode = WcOpcode::Recv, .byte_len = size_of(i));
        std::uint64_t seq = 0;
        copy_bytes(&seq, buf.data() + kSlot * static_cast<std::size_t>(i), 8);
        CHECK_EQ(seq, i) << "receive #" << i << " holds the wrong message (SENDs out of order)";
        CHECK_PATTERN(buf.data() + kSlot * static_cast<std::size_t>(i) + 8, size_of(i) - 8,
                      7000 + static_cast<std::uint64_t>(i), 0, "payload of message " + std::to_string(i));
      }
      env.barrier("done");
    } else {
      for (int i = 0; i < kCount; ++i) {
        std::uint64_t seq = static_cast<std::uint64_t>(i);
        copy_bytes(buf.data() + kSlot * static_cast<std::size_t>(i), &seq, 8);
        fill_pattern(buf.data() + kSlot * static_cast<std::size_t>(i) + 8, size_of(i) - 8, 7000 + seq);
      }
      auto qp = connected_qp(env, node, kTarget, "t");
      for (int i = 0; i < kCount; ++i) {
        Sge sge = mr->sge(kSlot * static_cast<std::size_t>(i), size_of(i));
        qp->post_send(send_wr(static_cast<std::uint64_t>(i), Opcode::Send, {&sge, 1}));
      }
      auto wcs = WAIT_WCS(*node.send_cq, kCount, "1000 sends");
      for (int i = 0; i < kCount; ++i) {
        CHECK_WC(wcs[static_cast<std::size_t>(i)], "send completion #" + std::to_string(i) + " (in posting order)",
                 .wr_id = static_cast<std::uint64_t>(i), .status = WcStatus::Success, .opcode = WcOpcode::Send);
      }
      env.barrier("done");
    }
  }));
}

}  // namespace
}  // namespace rdmx::test
