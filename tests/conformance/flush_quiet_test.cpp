// SPDX-License-Identifier: MIT
// Nothing is written after a flush: once a QP is in ERROR, the memory of the
// work it completed in error belongs to the application again, and neither
// this QP nor its peer may change it (as on InfiniBand, where a QP in ERROR
// places no more data).
//
// Each case lets the work race the error on purpose: whichever pieces the
// QP flushed are overwritten by the application at once, and must still
// hold what it wrote after the peer's QP is destroyed (after which no
// provider executes anything more of that connection).
#include <cstring>
#include <string>
#include <vector>

#include "conformance/conformance.hpp"

namespace rdmx::test {
namespace {

// Large enough for every provider's bulk path (cross-memory copies on shm,
// streamed payloads on tcp), several of them queued at once.
constexpr std::size_t kPiece = 4 << 20;
constexpr int kPieces = 16;
constexpr std::size_t kBytes = kPiece * kPieces;

constexpr std::uint64_t kHello = 1000;
constexpr std::uint64_t kSourceSeed = 61;
constexpr std::uint64_t kBeforeSeed = 62;
constexpr std::uint64_t kAfterFlushSeed = 63;

std::size_t at(std::size_t piece) { return piece * kPiece; }

// Sorts the completions of the pieces of `buffer`: a piece that succeeded
// holds the source's bytes; one that was flushed is rewritten by the
// application at once. Returns the flushed pieces.
std::vector<std::size_t> rewrite_flushed(const std::vector<WorkCompletion>& wcs, std::uint8_t* buffer,
                                         const std::string& what) {
  std::vector<std::size_t> flushed;
  for (const auto& wc : wcs) {
    CHECK(wc.status == WcStatus::Success || wc.status == WcStatus::WrFlushErr)
        << what << " wr_id " << wc.wr_id << ": " << describe(wc);
    if (wc.status == WcStatus::Success) {
      CHECK_PATTERN(buffer + at(wc.wr_id), kPiece, kSourceSeed, at(wc.wr_id), "a " + what + " that succeeded");
    } else {
      fill_pattern(buffer + at(wc.wr_id), kPiece, kAfterFlushSeed, at(wc.wr_id));
      flushed.push_back(wc.wr_id);
    }
  }
  return flushed;
}

// Once the peer's QP is gone: every flushed piece still holds what the application rewrote.
void check_still_rewritten(const std::uint8_t* buffer, const std::vector<std::size_t>& flushed,
                           const std::string& what) {
  for (std::size_t piece : flushed) {
    CHECK_PATTERN(buffer + at(piece), kPiece, kAfterFlushSeed, at(piece),
                  "the buffer of " + what + " wr_id " + std::to_string(piece) +
                      ", rewritten by the application after its flush: nothing may land there afterwards");
  }
}

// READs into local buffers, then set_error() at once: a READ's buffer that
// was flushed is not written by the answer still under way.
TEST_P(HostMemoryConformance, NoReadAnswerLandsAfterItsFlush) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    Node node(env);
    if (env.rank() == kTarget) {
      Buffer source(kBytes);
      fill_pattern(source.data(), kBytes, kSourceSeed);
      auto mr = node.pd->register_memory(source.data(), kBytes, Access::RemoteRead);
      auto qp = connected_qp(env, node, kInitiator, "t");
      publish_region(env, "region", *mr);
      await(env, "flushed");
      qp.reset();  // from here on this side executes nothing of the connection
      signal(env, "target-closed");
      env.barrier("done");
    } else {
      Buffer local(kBytes);
      fill_pattern(local.data(), kBytes, kBeforeSeed);
      auto mr = node.pd->register_memory(local.data(), kBytes, Access::LocalWrite);
      auto qp = connected_qp(env, node, kTarget, "t");
      RemoteRegion r = fetch_region(env, "region");
      std::vector<Sge> sges;
      for (int i = 0; i < kPieces; ++i) sges.push_back(mr->sge(at(i), kPiece));
      for (int i = 0; i < kPieces; ++i) {
        qp->post_send(rdma_wr(static_cast<std::uint64_t>(i), Opcode::RdmaRead, {&sges[i], 1}, r.addr + at(i), r.rkey));
      }
      qp->set_error("flush test: READs still under way");
      auto wcs = WAIT_WCS(*node.send_cq, kPieces, "READs completed or flushed");
      const std::vector<std::size_t> flushed = rewrite_flushed(wcs, local.data(), "READ");
      signal(env, "flushed");
      await(env, "target-closed");
      check_still_rewritten(local.data(), flushed, "READ");
      env.barrier("done");
    }
  }));
}

// SENDs into posted receives, and the receiver's set_error() while they
// arrive: a flushed receive's buffer is not written by a SEND still under way.
TEST_P(HostMemoryConformance, NoSendLandsInAFlushedReceive) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    Node node(env);
    if (env.rank() == kTarget) {
      Buffer inbox(kBytes);
      fill_pattern(inbox.data(), kBytes, kBeforeSeed);
      auto mr = node.pd->register_memory(inbox.data(), kBytes, Access::LocalWrite);
      Buffer hello(64);
      auto hello_mr = node.pd->register_memory(hello.data(), hello.size(), Access::LocalWrite);
      auto qp = make_qp(node);
      Sge hello_sge = hello_mr->sge(0, hello.size());
      qp->post_recv(RecvWr{.wr_id = kHello, .sg_list = {&hello_sge, 1}});
      for (int i = 0; i < kPieces; ++i) {
        Sge sge = mr->sge(at(i), kPiece);
        qp->post_recv(RecvWr{.wr_id = static_cast<std::uint64_t>(i), .sg_list = {&sge, 1}});
      }
      connect_qp(env, *qp, kInitiator, "t");
      await(env, "sent");
      qp->set_error("flush test: SENDs still arriving");
      auto wcs = WAIT_WCS(*node.recv_cq, kPieces + 1, "receives completed or flushed");
      CHECK_WC(wcs[0], "the first SEND's receive", .wr_id = kHello, .status = WcStatus::Success);
      wcs.erase(wcs.begin());
      const std::vector<std::size_t> flushed = rewrite_flushed(wcs, inbox.data(), "receive");
      signal(env, "flushed");
      await(env, "initiator-closed");
      check_still_rewritten(inbox.data(), flushed, "receive");
      env.barrier("done");
    } else {
      Buffer source(kBytes);
      fill_pattern(source.data(), kBytes, kSourceSeed);
      auto mr = node.pd->register_memory(source.data(), kBytes, Access::None);
      auto qp = connected_qp(env, node, kTarget, "t");
      // The connection is up (a QP that fails before it is may leave its
      // peer waiting for RDMX_TIMEOUT) before the SENDs race the error.
      Sge hello_sge = mr->sge(0, 64);
      qp->post_send(send_wr(kHello, Opcode::Send, {&hello_sge, 1}));
      auto hello = WAIT_WCS(*node.send_cq, 1, "the first SEND");
      CHECK_WC(hello[0], "the first SEND", .wr_id = kHello, .status = WcStatus::Success);
      for (int i = 0; i < kPieces; ++i) {
        Sge sge = mr->sge(at(i), kPiece);
        qp->post_send(send_wr(static_cast<std::uint64_t>(i), Opcode::Send, {&sge, 1}));
      }
      signal(env, "sent");
      // The SENDs complete, or fail once the receiver's QP is in ERROR.
      WAIT_WCS(*node.send_cq, kPieces, "SENDs completed or failed");
      await(env, "flushed");
      qp.reset();
      signal(env, "initiator-closed");
      env.barrier("done");
    }
  }));
}

}  // namespace
}  // namespace rdmx::test
