// SPDX-License-Identifier: MIT
// Scatter-gather lists on both sides: several SGEs from different regions.
#include <cstring>
#include <vector>

#include "conformance/conformance.hpp"

namespace rdmx::test {
namespace {

struct Segment {
  int region;  // which of the two regions
  std::uint32_t offset;
  std::uint32_t length;
};

// Fills the segments with consecutive positions of one pattern stream.
void fill_segments(const std::vector<Buffer*>& bufs, const std::vector<Segment>& segs, std::uint64_t seed) {
  std::uint64_t pos = 0;
  for (const auto& s : segs) {
    fill_pattern(bufs[static_cast<std::size_t>(s.region)]->data() + s.offset, s.length, seed, pos);
    pos += s.length;
  }
}

// Checks that the first `total` bytes of the stream landed in `segs` in order
// and that the rest of each segment (and everything outside) kept `fill`.
void check_segments(const std::vector<Buffer*>& bufs, const std::vector<Segment>& segs, std::uint64_t seed,
                    std::uint64_t total, std::uint8_t fill, const char* what) {
  std::vector<std::vector<bool>> covered;
  for (auto* b : bufs) covered.emplace_back(b->size(), false);
  std::uint64_t pos = 0;
  for (std::size_t i = 0; i < segs.size(); ++i) {
    const auto& s = segs[i];
    std::uint64_t take = std::min<std::uint64_t>(s.length, total - pos);
    auto* base = bufs[static_cast<std::size_t>(s.region)]->data() + s.offset;
    check_pattern(base, take, seed, pos, std::string(what) + " segment " + std::to_string(i), __FILE__, __LINE__);
    for (std::uint64_t k = 0; k < take; ++k) covered[static_cast<std::size_t>(s.region)][s.offset + k] = true;
    pos += take;
  }
  for (std::size_t r = 0; r < bufs.size(); ++r) {
    std::vector<std::uint8_t> bytes(bufs[r]->size());
    copy_bytes(bytes.data(), bufs[r]->data(), bytes.size());
    for (std::size_t k = 0; k < bytes.size(); ++k) {
      if (!covered[r][k] && bytes[k] != fill) {
        FAIL_RANK() << what << ": region " << r << " byte " << k << " outside the scattered data was changed to "
                    << static_cast<int>(bytes[k]);
      }
    }
  }
}

// Send side: 100 bytes of A, 300 of B, 500 of A (900). Receive side: 50 of C,
// 400 of D, 200 of C, 600 of D (capacity 1250).
const std::vector<Segment> kSendSegs = {{0, 0, 100}, {1, 10, 300}, {0, 500, 500}};
const std::vector<Segment> kRecvSegs = {{0, 0, 50}, {1, 7, 400}, {0, 1000, 200}, {1, 2000, 600}};
constexpr std::uint32_t kSendTotal = 900;

TEST_P(Conformance, SendAndReceiveScatterGather) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    Node node(env);
    Buffer a(4096), b(4096);
    std::vector<Buffer*> bufs = {&a, &b};
    set_bytes(a.data(), 0xEE, a.size());
    set_bytes(b.data(), 0xEE, b.size());
    auto mra = node.pd->register_memory(a.data(), a.size(), Access::LocalWrite);
    auto mrb = node.pd->register_memory(b.data(), b.size(), Access::LocalWrite);
    auto sges_of = [&](const std::vector<Segment>& segs) {
      std::vector<Sge> sges;
      for (const auto& s : segs) sges.push_back((s.region == 0 ? mra : mrb)->sge(s.offset, s.length));
      return sges;
    };
    if (env.rank() == kTarget) {
      auto qp = make_qp(node);
      auto sges = sges_of(kRecvSegs);
      qp->post_recv(RecvWr{.wr_id = 9, .sg_list = sges});
      connect_qp(env, *qp, kInitiator, "t");
      CHECK_WC(WAIT_WC(*node.recv_cq, "the receive"), "receive", .wr_id = 9, .status = WcStatus::Success,
               .opcode = WcOpcode::Recv, .byte_len = kSendTotal, .qp_num = qp->qp_num());
      check_segments(bufs, kRecvSegs, 21, kSendTotal, 0xEE, "scattered receive");
      env.barrier("done");
    } else {
      fill_segments(bufs, kSendSegs, 21);
      auto qp = connected_qp(env, node, kTarget, "t");
      auto sges = sges_of(kSendSegs);
      qp->post_send(send_wr(3, Opcode::Send, sges));
      CHECK_WC(WAIT_WC(*node.send_cq, "the send"), "send", .wr_id = 3, .status = WcStatus::Success,
               .opcode = WcOpcode::Send, .qp_num = qp->qp_num());
      env.barrier("done");
    }
  }));
}

// RDMA WRITE gathers from several SGEs into one contiguous remote range, RDMA
// READ scatters one remote range into several SGEs.
TEST_P(Conformance, RdmaScatterGather) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    Node node(env);
    if (env.rank() == kTarget) {
      Buffer target(8192), source(8192);
      set_bytes(target.data(), 0, target.size());
      fill_pattern(source.data(), source.size(), 32);
      auto mrt = node.pd->register_memory(target.data(), target.size(), Access::LocalWrite | Access::RemoteWrite);
      auto mrs = node.pd->register_memory(source.data(), source.size(), Access::RemoteRead);
      auto qp = connected_qp(env, node, kInitiator, "t");
      publish_region(env, "write-region", *mrt);
      publish_region(env, "read-region", *mrs);
      env.barrier("done");
      CHECK_BYTES(target.data(), 33, 0, "before the gathered write");
      CHECK_PATTERN(target.data() + 33, kSendTotal, 31, 0, "gathered write");
      CHECK_BYTES(target.data() + 33 + kSendTotal, target.size() - 33 - kSendTotal, 0, "after the gathered write");
    } else {
      Buffer a(4096), b(4096);
      std::vector<Buffer*> bufs = {&a, &b};
      set_bytes(a.data(), 0xEE, a.size());
      set_bytes(b.data(), 0xEE, b.size());
      auto mra = node.pd->register_memory(a.data(), a.size(), Access::LocalWrite);
      auto mrb = node.pd->register_memory(b.data(), b.size(), Access::LocalWrite);
      auto sges_of = [&](const std::vector<Segment>& segs) {
        std::vector<Sge> sges;
        for (const auto& s : segs) sges.push_back((s.region == 0 ? mra : mrb)->sge(s.offset, s.length));
        return sges;
      };
      auto qp = connected_qp(env, node, kTarget, "t");
      RemoteRegion wr_region = fetch_region(env, "write-region");
      RemoteRegion rd_region = fetch_region(env, "read-region");

      fill_segments(bufs, kSendSegs, 31);
      auto wsges = sges_of(kSendSegs);
      qp->post_send(rdma_wr(1, Opcode::RdmaWrite, wsges, wr_region.addr + 33, wr_region.rkey));
      CHECK_WC(WAIT_WC(*node.send_cq, "gathered write"), "gathered write", .wr_id = 1, .status = WcStatus::Success,
               .opcode = WcOpcode::RdmaWrite, .qp_num = qp->qp_num());

      set_bytes(a.data(), 0xEE, a.size());
      set_bytes(b.data(), 0xEE, b.size());
      auto rsges = sges_of(kRecvSegs);  // capacity 1250: read exactly that much
      qp->post_send(rdma_wr(2, Opcode::RdmaRead, rsges, rd_region.addr + 77, rd_region.rkey));
      CHECK_WC(WAIT_WC(*node.send_cq, "scattered read"), "scattered read", .wr_id = 2, .status = WcStatus::Success,
               .opcode = WcOpcode::RdmaRead, .byte_len = 1250, .qp_num = qp->qp_num());
      // The read stream starts at position 77 of pattern 32.
      std::uint64_t pos = 77;
      for (std::size_t i = 0; i < kRecvSegs.size(); ++i) {
        const auto& s = kRecvSegs[i];
        check_pattern(bufs[static_cast<std::size_t>(s.region)]->data() + s.offset, s.length, 32, pos,
                      "scattered read segment " + std::to_string(i), __FILE__, __LINE__);
        pos += s.length;
      }
      env.barrier("done");
    }
  }));
}

// The largest SGE counts the QP was created with work on both sides.
TEST_P(Conformance, MaxSgeCount) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    Node node(env);
    Buffer buf(65536);
    set_bytes(buf.data(), 0xEE, buf.size());
    auto mr = node.pd->register_memory(buf.data(), buf.size(), Access::LocalWrite);
    if (env.rank() == kTarget) {
      auto qp = make_qp(node);
      const std::uint32_t n = qp->caps().max_recv_sge;
      // SGE i: 3 + i bytes at 1000 * i + 1 (odd addresses, growing sizes).
      std::vector<Sge> sges;
      std::uint32_t total = 0;
      for (std::uint32_t i = 0; i < n; ++i) {
        sges.push_back(mr->sge(1000 * i + 1, 3 + i));
        total += 3 + i;
      }
      qp->post_recv(RecvWr{.wr_id = 1, .sg_list = sges});
      env.store().set("recv-sges", std::string_view(std::to_string(n)));
      connect_qp(env, *qp, kInitiator, "t");
      CHECK_WC(WAIT_WC(*node.recv_cq, "receive"), "receive into max_recv_sge SGEs", .wr_id = 1,
               .status = WcStatus::Success, .opcode = WcOpcode::Recv, .byte_len = total);
      std::uint64_t pos = 0;
      for (std::uint32_t i = 0; i < n; ++i) {
        check_pattern(buf.data() + 1000 * i + 1, 3 + i, 41, pos, "SGE " + std::to_string(i), __FILE__, __LINE__);
        pos += 3 + i;
      }
      env.barrier("done");
    } else {
      auto qp = connected_qp(env, node, kTarget, "t");
      const std::uint32_t n_send = qp->caps().max_send_sge;
      const auto n_recv = static_cast<std::uint32_t>(std::stoul(env.store().get_string("recv-sges")));
      // The receiver's layout: n_recv SGEs of 3 + i bytes; spread that stream over n_send SGEs.
      std::uint32_t total = 0;
      for (std::uint32_t i = 0; i < n_recv; ++i) total += 3 + i;
      std::vector<Sge> sges;
      std::uint32_t left = total;
      std::uint64_t pos = 0;
      for (std::uint32_t i = 0; i < n_send; ++i) {
        std::uint32_t len = i + 1 == n_send ? left : std::min(left, total / n_send);
        fill_pattern(buf.data() + 2000 * i + 5, len, 41, pos);
        sges.push_back(mr->sge(2000 * i + 5, len));
        pos += len;
        left -= len;
      }
      qp->post_send(send_wr(2, Opcode::Send, sges));
      CHECK_WC(WAIT_WC(*node.send_cq, "send"), "send from max_send_sge SGEs", .wr_id = 2, .status = WcStatus::Success,
               .opcode = WcOpcode::Send);
      env.barrier("done");
    }
  }));
}

}  // namespace
}  // namespace rdmx::test
