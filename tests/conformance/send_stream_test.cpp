// SPDX-License-Identifier: MIT
// SEND streams against a receiver that re-posts its receives one at a time,
// and the receiver-not-ready (RNR) cases such streams run into: a SEND that
// finds no receive waits (RNR retry, up to the RNR window) and then succeeds,
// without disturbing the SENDs around it. These are the patterns of
// `rdmx perf p2p send_bw` and of eager message protocols.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "conformance/conformance.hpp"

namespace rdmx::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

long long ms_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

constexpr int kReceiver = 0;
constexpr int kSender = 1;

// One phase of a stream: `messages` SENDs of `size` bytes, at most `window`
// posted and not yet completed, one in `signal_every` signaled (and the last);
// the receiver keeps at most `receives` posted.
struct StreamPhase {
  std::size_t size;
  std::uint64_t messages;
  std::uint64_t window;
  std::uint64_t receives;
  std::uint64_t signal_every;
};

std::string phase_name(const StreamPhase& p) {
  return std::to_string(p.messages) + " SENDs of " + std::to_string(p.size) + " bytes (window " +
         std::to_string(p.window) + ", " + std::to_string(p.receives) + " receives)";
}

// Message k of phase `phase` from rank `from` carries pattern stream seed_of(...).
std::uint64_t seed_of(std::size_t phase, int from, std::uint64_t k) {
  return 1'000'000 * (2 * phase + static_cast<std::uint64_t>(from) + 1) + k;
}

// The sending side of one phase: posts as fast as the window allows, in
// `window` slots (a slot is refilled only when its SEND has completed).
class StreamSender {
 public:
  StreamSender(QueuePair& qp, MemoryRegion& mr, std::uint8_t* slots, const StreamPhase& p, std::size_t phase, int from)
      : qp_(qp), mr_(mr), slots_(slots), p_(p), phase_(phase), from_(from) {}
  bool done() const { return completed_ == p_.messages; }
  std::string progress() const {
    return std::to_string(posted_) + " posted, " + std::to_string(completed_) + " completed";
  }
  // Posts what the window allows and reaps send completions; false when nothing happened.
  bool step(CompletionQueue& cq) {
    bool did = false;
    while (posted_ < p_.messages && posted_ - completed_ < p_.window) {
      const std::size_t offset = (posted_ % p_.window) * p_.size;
      fill_pattern(slots_ + offset, p_.size, seed_of(phase_, from_, posted_));
      Sge sge = mr_.sge(offset, static_cast<std::uint32_t>(p_.size));
      const bool last = posted_ + 1 == p_.messages;
      qp_.post_send(send_wr(posted_, Opcode::Send, {&sge, 1}, last || (posted_ + 1) % p_.signal_every == 0));
      ++posted_;
      did = true;
    }
    std::array<WorkCompletion, 16> wcs;
    const std::size_t n = cq.poll(wcs);
    for (std::size_t i = 0; i < n; ++i) {
      // A signaled completion covers every SEND up to its wr_id.
      const std::uint64_t expected = std::min(p_.messages, (completed_ / p_.signal_every + 1) * p_.signal_every) - 1;
      CHECK_WC(wcs[i], "signaled SEND", .wr_id = expected, .status = WcStatus::Success, .opcode = WcOpcode::Send,
               .byte_len = static_cast<std::uint32_t>(p_.size), .qp_num = qp_.qp_num());
      completed_ = expected + 1;
    }
    return did || n > 0;
  }

 private:
  QueuePair& qp_;
  MemoryRegion& mr_;
  std::uint8_t* slots_;
  StreamPhase p_;
  std::size_t phase_;
  int from_;
  std::uint64_t posted_ = 0;
  std::uint64_t completed_ = 0;
};

// The receiving side of one phase: `receives` slots, each receive re-posted
// only after the previous occupant of its slot was checked and poisoned, one
// completion at a time, so it runs behind the sender and SENDs find no
// receive (RNR).
class StreamReceiver {
 public:
  StreamReceiver(QueuePair& qp, MemoryRegion& mr, std::uint8_t* slots, const StreamPhase& p, std::size_t phase,
                 int from)
      : qp_(qp), mr_(mr), slots_(slots), p_(p), phase_(phase), from_(from) {
    set_bytes(slots_, 0xEE, p_.receives * p_.size);
    while (posted_ < std::min(p_.receives, p_.messages)) post();
  }
  bool done() const { return received_ == p_.messages; }
  std::string progress() const { return std::to_string(received_) + " received"; }
  bool step(CompletionQueue& cq) {
    WorkCompletion wc;
    if (cq.poll({&wc, 1}) == 0) return false;
    const std::string what = "receive of message " + std::to_string(received_);
    CHECK_WC(wc, what, .wr_id = received_, .status = WcStatus::Success, .opcode = WcOpcode::Recv,
             .byte_len = static_cast<std::uint32_t>(p_.size), .qp_num = qp_.qp_num());
    std::uint8_t* slot = slots_ + (received_ % p_.receives) * p_.size;
    CHECK_PATTERN(slot, p_.size, seed_of(phase_, from_, received_), 0, "payload of " + what);
    set_bytes(slot, 0xEE, p_.size);  // a later message must bring its own bytes
    ++received_;
    if (posted_ < p_.messages) post();
    return true;
  }

 private:
  void post() {
    Sge sge = mr_.sge((posted_ % p_.receives) * p_.size, static_cast<std::uint32_t>(p_.size));
    qp_.post_recv(RecvWr{.wr_id = posted_, .sg_list = {&sge, 1}});
    ++posted_;
  }
  QueuePair& qp_;
  MemoryRegion& mr_;
  std::uint8_t* slots_;
  StreamPhase p_;
  std::size_t phase_;
  int from_;
  std::uint64_t posted_ = 0;
  std::uint64_t received_ = 0;
};

// Runs the phases one after the other on one QP: rank 1 sends to rank 0, or
// with `both_ways` each rank sends to the other while it receives, from one
// thread that also drives progress when nothing happens.
void run_stream(RankEnv& env, const std::vector<StreamPhase>& phases, bool both_ways) {
  std::size_t largest = 0;
  std::uint64_t widest = 0;
  std::uint64_t most = 0;
  for (const auto& p : phases) {
    largest = std::max(largest, p.size);
    widest = std::max(widest, p.window);
    most = std::max(most, p.receives);
  }
  Node node(env);
  ConnectOptions opts;
  opts.rnr_timeout = 20s;  // the receiver is slow on purpose; a loaded machine must not turn that into an error
  const int peer = 1 - env.rank();
  auto qp = connected_qp(env, node, peer, "stream", {}, opts);
  const bool sends = both_ways || env.rank() == kSender;
  const bool receives = both_ways || env.rank() == kReceiver;
  Buffer out(sends ? largest * widest : 4096);
  Buffer in(receives ? largest * most : 4096);
  auto out_mr = node.pd->register_memory(out.data(), out.size(), Access::LocalWrite);
  auto in_mr = node.pd->register_memory(in.data(), in.size(), Access::LocalWrite);
  for (std::size_t ph = 0; ph < phases.size(); ++ph) {
    const StreamPhase& p = phases[ph];
    std::optional<StreamReceiver> rx;
    if (receives) rx.emplace(*qp, *in_mr, in.data(), p, ph, peer);
    env.barrier("phase " + std::to_string(ph));  // the first receives are posted
    std::optional<StreamSender> tx;
    if (sends) tx.emplace(*qp, *out_mr, out.data(), p, ph, env.rank());
    ScopedTrace trace([&] {
      return "phase " + std::to_string(ph) + ", " + phase_name(p) + ": " +
             (tx ? "sending: " + tx->progress() + "; " : std::string()) +
             (rx ? "receiving: " + rx->progress() + "; " : std::string()) + "qp " + to_string(qp->state());
    });
    // A phase with too few receives waits out RNR backoffs by design: its
    // bound is a multiple of the connection's RNR patience, not only
    // RDMX_TIMEOUT (10 s in the emulated verbs guest, where 200 such SENDs
    // took longer, and 48 of 1 MiB took over 30 s while the host compiled).
    const auto bound = std::max<std::chrono::milliseconds>(default_timeout(), opts.rnr_timeout * 3);
    const auto deadline = Clock::now() + bound;
    while ((tx && !tx->done()) || (rx && !rx->done())) {
      bool did = false;
      if (tx && !tx->done()) did = tx->step(*node.send_cq);
      if (rx && !rx->done()) did = rx->step(*node.recv_cq) || did;
      if (!did) {
        node.device->progress();
        CHECK(Clock::now() < deadline) << "the phase did not finish within " << bound.count() << " ms";
      }
    }
    CHECK_NO_WC(*node.send_cq, "send CQ after the phase");
    CHECK_NO_WC(*node.recv_cq, "receive CQ after the phase");
    CHECK_EQ(qp->state(), QpState::Rts);
  }
  env.barrier("done");
}

// As `rdmx perf p2p send_bw`: as many receives as the sender's window, each
// re-posted when its completion has been checked. A SEND completes once it
// has consumed a receive, but the receiver re-posts later, so the sender's
// next SEND may still find none and wait (RNR). Every payload arrives intact,
// in order, and nothing fails. The sizes take the providers' different paths:
// inline in one cache line or frame, and copied across memories (64 KiB, 1 MiB).
TEST_P(Conformance, SendStreamToReceiverRepostingOneAtATime) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    run_stream(env, {{64, 20000, 64, 64, 10}, {64 * 1024, 2000, 32, 32, 10}, {1024 * 1024, 160, 16, 16, 5}}, false);
  }));
}

// Far fewer receives than SENDs in flight: most SENDs find no receive and
// are retried until the receiver re-posts, and every one then succeeds.
TEST_P(Conformance, SendStreamWithTooFewReceivesRetriesAfterRnr) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    run_stream(env, {{64, 2000, 32, 2, 8}, {64 * 1024, 400, 32, 2, 8}, {1024 * 1024, 48, 8, 2, 3}}, false);
  }));
}

// Both ranks stream SENDs to each other over one QP, each with too few
// receives for the other's SENDs. A rank's SEND waiting for a receive here
// must not hold up what travels the other way: the acknowledgements and
// RNR notices of this rank's own SENDs.
TEST_P(Conformance, SendStreamsBothWaysWithTooFewReceives) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    run_stream(env, {{64, 600, 32, 2, 8}, {64 * 1024, 200, 16, 2, 4}, {1024 * 1024, 48, 8, 2, 3}}, true);
  }));
}

// Two ranks SEND to each other while neither has a receive posted, so each
// SEND waits for the other's receive (RNR). Rank 0 posts its receive first;
// rank 1 sees its SEND complete and only then posts the receive rank 0's SEND
// waits for. Both SENDs succeed, with their payloads, and nothing else fails
// (a notice that a SEND had to wait may reach the sender after the news that
// it completed, and must not be mistaken for anything else).
TEST_P(Conformance, CrossedSendsWaitingForReceivesBothSucceed) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    constexpr int kRounds = 24;
    constexpr std::size_t kSize = 256;
    Node node(env);
    ConnectOptions opts;
    opts.rnr_timeout = 20s;
    Buffer buf(4 * kSize);
    auto mr = node.pd->register_memory(buf.data(), buf.size(), Access::LocalWrite);
    const int peer = 1 - env.rank();
    auto qp = make_qp(node);
    // A first exchange, so both directions are connected before the rounds.
    Sge warm_in = mr->sge(0, kSize);
    qp->post_recv(RecvWr{.wr_id = 999, .sg_list = {&warm_in, 1}});
    connect_qp(env, *qp, peer, "t", opts);
    env.barrier("connected");
    Sge warm_out = mr->sge(kSize, 8);
    qp->post_send(send_wr(999, Opcode::Send, {&warm_out, 1}));
    CHECK_WC(WAIT_WC(*node.send_cq, "the first SEND"), "first SEND", .wr_id = 999, .status = WcStatus::Success);
    CHECK_WC(WAIT_WC(*node.recv_cq, "the first receive"), "first receive", .wr_id = 999, .status = WcStatus::Success,
             .byte_len = 8);
    Sge out = mr->sge(2 * kSize, kSize);
    Sge in = mr->sge(3 * kSize, kSize);
    for (int r = 0; r < kRounds; ++r) {
      const auto round = std::to_string(r);
      const auto id = static_cast<std::uint64_t>(r);
      ScopedTrace trace([&] { return "round " + round + ", qp state " + to_string(qp->state()); });
      set_bytes(buf.data() + 3 * kSize, 0, kSize);
      fill_pattern(buf.data() + 2 * kSize, kSize, 7000 + 2 * id + static_cast<std::uint64_t>(env.rank()));
      if (env.rank() == 0) {
        qp->post_send(send_wr(id, Opcode::Send, {&out, 1}));  // waits: rank 1 has no receive
        signal(env, "sent0/" + round);
        await(env, "sent1/" + round);  // meanwhile rank 1's SEND found no receive here
        qp->post_recv(RecvWr{.wr_id = id, .sg_list = {&in, 1}});
        CHECK_WC(WAIT_WC(*node.recv_cq, "rank 1's SEND"), "receive", .wr_id = id, .status = WcStatus::Success,
                 .opcode = WcOpcode::Recv, .byte_len = kSize);
        CHECK_PATTERN(buf.data() + 3 * kSize, kSize, 7000 + 2 * id + 1, 0, "rank 1's payload");
        CHECK_WC(WAIT_WC(*node.send_cq, "this rank's SEND"), "SEND", .wr_id = id, .status = WcStatus::Success,
                 .opcode = WcOpcode::Send);
      } else {
        await(env, "sent0/" + round);
        qp->post_send(send_wr(id, Opcode::Send, {&out, 1}));  // waits: rank 0 has no receive yet
        signal(env, "sent1/" + round);
        CHECK_WC(WAIT_WC(*node.send_cq, "this rank's SEND"), "SEND", .wr_id = id, .status = WcStatus::Success,
                 .opcode = WcOpcode::Send);
        qp->post_recv(RecvWr{.wr_id = id, .sg_list = {&in, 1}});
        CHECK_WC(WAIT_WC(*node.recv_cq, "rank 0's SEND"), "receive", .wr_id = id, .status = WcStatus::Success,
                 .opcode = WcOpcode::Recv, .byte_len = kSize);
        CHECK_PATTERN(buf.data() + 3 * kSize, kSize, 7000 + 2 * id, 0, "rank 0's payload");
      }
      CHECK_EQ(qp->state(), QpState::Rts);
      env.barrier("round " + round);
    }
    CHECK_NO_WC(*node.send_cq, "send CQ after the rounds");
    CHECK_NO_WC(*node.recv_cq, "receive CQ after the rounds");
    env.barrier("done");
  }));
}

// An unsignaled SEND that had to wait for a receive, and then got one, has
// succeeded: it must not fail with RNR_RETRY_EXC_ERR when its RNR window
// (counted from when it first found no receive) runs out later.
TEST_P(Conformance, UnsignaledSendDeliveredAfterRnrDoesNotFailLater) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    constexpr auto kWindow = 1000ms;
    Node node(env);
    ConnectOptions opts;
    opts.rnr_timeout = kWindow;
    Buffer buf(8192);
    auto mr = node.pd->register_memory(buf.data(), buf.size(), Access::LocalWrite);
    auto qp = make_qp(node);
    if (env.rank() == kReceiver) {
      // A first SEND, received, so the connection is up before the one that matters.
      Sge warm = mr->sge(0, 4096);
      qp->post_recv(RecvWr{.wr_id = 0, .sg_list = {&warm, 1}});
      connect_qp(env, *qp, kSender, "t", opts);
      CHECK_WC(WAIT_WC(*node.recv_cq, "the first SEND"), "first receive", .wr_id = 0, .status = WcStatus::Success);
      set_bytes(buf.data(), 0, 4096);
      await(env, "sent");
      // Let the SEND find no receive here (the provider may also get there by itself).
      for (int i = 0; i < 1000; ++i) node.device->progress();
      Sge sge = mr->sge(0, 4096);
      qp->post_recv(RecvWr{.wr_id = 1, .sg_list = {&sge, 1}});
      CHECK_WC(WAIT_WC(*node.recv_cq, "the SEND that waited"), "late receive", .wr_id = 1, .status = WcStatus::Success,
               .opcode = WcOpcode::Recv, .byte_len = 100);
      CHECK_PATTERN(buf.data(), 100, 31, 0, "payload after RNR");
      Sge sge2 = mr->sge(4096, 4096);
      qp->post_recv(RecvWr{.wr_id = 2, .sg_list = {&sge2, 1}});
      signal(env, "received");
      CHECK_WC(WAIT_WC(*node.recv_cq, "the signaled SEND"), "second receive", .wr_id = 2, .status = WcStatus::Success,
               .opcode = WcOpcode::Recv, .byte_len = 200);
      CHECK_PATTERN(buf.data() + 4096, 200, 32, 0, "second payload");
      env.barrier("done");
    } else {
      fill_pattern(buf.data(), 100, 31);
      fill_pattern(buf.data() + 4096, 200, 32);
      connect_qp(env, *qp, kReceiver, "t", opts);
      Sge sge = mr->sge(0, 100);
      qp->post_send(send_wr(0, Opcode::Send, {&sge, 1}));
      CHECK_WC(WAIT_WC(*node.send_cq, "the first SEND"), "first SEND", .wr_id = 0, .status = WcStatus::Success);
      qp->post_send(send_wr(1, Opcode::Send, {&sge, 1}, /*signaled=*/false));
      signal(env, "sent");
      await(env, "received");
      // Past the RNR window of the unsignaled SEND (it started before "sent"),
      // with progress driven: nothing may complete, the QP stays usable.
      const auto until = Clock::now() + kWindow + 300ms;
      while (Clock::now() < until) {
        node.device->progress();
        WorkCompletion wc;
        if (node.send_cq->poll({&wc, 1}) != 0) {
          FAIL_RANK() << "the unsignaled SEND, delivered after RNR, completed later: " << describe(wc);
        }
      }
      CHECK_EQ(qp->state(), QpState::Rts);
      Sge sge2 = mr->sge(4096, 200);
      qp->post_send(send_wr(2, Opcode::Send, {&sge2, 1}));
      CHECK_WC(WAIT_WC(*node.send_cq, "the signaled SEND"), "the only send completion", .wr_id = 2,
               .status = WcStatus::Success, .opcode = WcOpcode::Send, .byte_len = 200);
      CHECK_NO_WC(*node.send_cq, "send CQ");
      env.barrier("done");
    }
  }));
}

// A SEND that waits for a receive holds up only the requests behind it on
// its QP, in its direction: the other direction keeps working. Rank 0's SEND
// waits for rank 1's receive while rank 1 READs from rank 0 (and runs an
// atomic there) and waits for those first; then it posts the receive.
TEST_P(Conformance, ReadAndAtomicCompleteWhilePeerSendWaitsForReceive) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    constexpr auto kWindow = 5000ms;  // rank 0's SEND gives up after this; rank 1 waits no longer either
    Node node(env);
    ConnectOptions opts;
    opts.rnr_timeout = kWindow;
    Buffer buf(3 * 65536);
    auto mr = node.pd->register_memory(buf.data(), buf.size(),
                                       Access::LocalWrite | Access::RemoteRead | Access::RemoteAtomic);
    auto qp = make_qp(node);
    const int peer = 1 - env.rank();
    Sge warm_in = mr->sge(0, 64);
    qp->post_recv(RecvWr{.wr_id = 99, .sg_list = {&warm_in, 1}});
    publish_region(env, "region/" + std::to_string(env.rank()), *mr);
    connect_qp(env, *qp, peer, "t", opts);
    env.barrier("connected");
    Sge warm_out = mr->sge(64, 8);
    qp->post_send(send_wr(99, Opcode::Send, {&warm_out, 1}));
    CHECK_WC(WAIT_WC(*node.send_cq, "the first SEND"), "first SEND", .wr_id = 99, .status = WcStatus::Success);
    CHECK_WC(WAIT_WC(*node.recv_cq, "the first receive"), "first receive", .wr_id = 99, .status = WcStatus::Success);
    if (env.rank() == 0) {
      fill_pattern(buf.data(), 65536, 61);                   // what rank 1 READs, small
      fill_pattern(buf.data() + 65536, 65536, 62);           // and large
      buf.store64(2 * 65536, 1000);                          // the atomic's target
      fill_pattern(buf.data() + 2 * 65536 + 4096, 512, 63);  // the SEND's payload
      Sge sge = mr->sge(2 * 65536 + 4096, 512);
      qp->post_send(send_wr(1, Opcode::Send, {&sge, 1}));  // waits: rank 1 has no receive
      signal(env, "sent");
      CHECK_WC(WAIT_WC(*node.send_cq, "the SEND"), "SEND that waited for rank 1's receive", .wr_id = 1,
               .status = WcStatus::Success, .opcode = WcOpcode::Send);
      CHECK_EQ(buf.load64(2 * 65536), std::uint64_t{1007}) << "the FETCH_ADD";
      env.barrier("done");
    } else {
      RemoteRegion r = fetch_region(env, "region/0");
      set_bytes(buf.data(), 0, buf.size());
      await(env, "sent");
      // Let the SEND find no receive here (the provider may also get there by itself).
      for (int i = 0; i < 1000; ++i) node.device->progress();
      Sge small = mr->sge(0, 100);
      Sge large = mr->sge(65536, 65536);
      Sge result = mr->sge(2 * 65536, 8);
      qp->post_send(rdma_wr(2, Opcode::RdmaRead, {&small, 1}, r.addr, r.rkey));
      qp->post_send(rdma_wr(3, Opcode::RdmaRead, {&large, 1}, r.addr + 65536, r.rkey));
      SendWr add = rdma_wr(4, Opcode::AtomicFetchAdd, {&result, 1}, r.addr + 2 * 65536, r.rkey);
      add.compare_add = 7;
      qp->post_send(add);
      const auto start = Clock::now();
      auto wcs = wait_wcs(*node.send_cq, 3, "READs and an atomic while rank 0's SEND waits for a receive here",
                          __FILE__, __LINE__, kWindow / 2);
      CHECK_LT(ms_since(start), kWindow.count() / 2);
      CHECK_WC(wcs[0], "small READ", .wr_id = 2, .status = WcStatus::Success, .opcode = WcOpcode::RdmaRead,
               .byte_len = 100);
      CHECK_WC(wcs[1], "large READ", .wr_id = 3, .status = WcStatus::Success, .opcode = WcOpcode::RdmaRead,
               .byte_len = 65536);
      CHECK_WC(wcs[2], "FETCH_ADD", .wr_id = 4, .status = WcStatus::Success, .opcode = WcOpcode::FetchAdd);
      CHECK_PATTERN(buf.data(), 100, 61, 0, "small READ");
      CHECK_PATTERN(buf.data() + 65536, 65536, 62, 0, "large READ");
      CHECK_EQ(buf.load64(2 * 65536), std::uint64_t{1000}) << "FETCH_ADD's old value";
      Sge in = mr->sge(2 * 65536 + 4096, 4096);
      qp->post_recv(RecvWr{.wr_id = 5, .sg_list = {&in, 1}});
      CHECK_WC(WAIT_WC(*node.recv_cq, "rank 0's SEND"), "receive posted after the READs", .wr_id = 5,
               .status = WcStatus::Success, .opcode = WcOpcode::Recv, .byte_len = 512);
      CHECK_PATTERN(buf.data() + 2 * 65536 + 4096, 512, 63, 0, "rank 0's payload");
      CHECK_EQ(qp->state(), QpState::Rts);
      env.barrier("done");
    }
  }));
}

}  // namespace
}  // namespace rdmx::test
