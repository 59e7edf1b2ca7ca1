// SPDX-License-Identifier: MIT
// tcp QP connections prove the job secret. Rank 0 is the victim, with a live
// QP to rank 1; rank 1 also attacks it from outside the API and through it:
//   - a raw HELLO with a forged proof, and one with a proof made for another
//     connection's challenge (a replay): both get REFUSED and are closed;
//   - a QP of its own with another secret: it fails saying it was refused;
//   - a QP with no secret: it fails saying the victim requires one;
//   - a raw HELLO with a valid proof: the victim answers ACCEPT with a proof
//     of its own over the connector's challenge.
// The victim logs each refusal with the attacker's address, its own QP and
// memory are untouched, and the job goes on over the authenticated QP.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "providers/tcp/address.hpp"
#include "providers/tcp/wire.hpp"
#include "services/auth.hpp"
#include "support/harness.hpp"
#include "support/verbs_util.hpp"
#include "tcp/peers.hpp"

namespace rdmx::test {
namespace {

namespace wire = rdmx::tcp::wire;

// A raw connection to the victim's listener, for bytes no QP would send.
class RawConnection {
 public:
  explicit RawConnection(const tcp::TcpAddress& to) {
    fd_ = ::socket(to.socket.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd_ >= 0) << "socket: " << std::strerror(errno);
    CHECK_EQ(::connect(fd_, reinterpret_cast<const sockaddr*>(&to.socket), to.socket_len), 0)
        << "connecting to the victim's listener " << to.to_string() << ": " << std::strerror(errno);
  }
  ~RawConnection() { ::close(fd_); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  // Up to `n` bytes within 5 s; fewer when the peer closes first.
  std::vector<std::uint8_t> receive(std::size_t n) {
    std::vector<std::uint8_t> out(n);
    std::size_t got = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (got < n && std::chrono::steady_clock::now() < deadline) {
      pollfd pfd{fd_, POLLIN, 0};
      if (::poll(&pfd, 1, 100) <= 0) continue;
      const ssize_t r = ::recv(fd_, out.data() + got, n - got, 0);
      if (r <= 0) break;
      got += static_cast<std::size_t>(r);
    }
    out.resize(got);
    return out;
  }
  core::auth::Challenge challenge() {
    const std::vector<std::uint8_t> frame = receive(wire::kHeaderSize + wire::kChallengePayload);
    CHECK_EQ(frame.size(), wire::kHeaderSize + wire::kChallengePayload) << "the victim sent no whole CHALLENGE";
    const wire::Header h = wire::decode(frame.data());
    CHECK(h.type == wire::FrameType::Challenge) << "first frame type " << static_cast<int>(h.type);
    CHECK_EQ(h.arg0, 1u) << "a device with a secret must say that a proof is required";
    core::auth::Challenge c;
    std::memcpy(c.data(), frame.data() + wire::kHeaderSize, c.size());
    return c;
  }
  void send_hello(const wire::Header& hello, const core::auth::Proof& proof, const core::auth::Challenge& ours = {}) {
    std::uint8_t frame[wire::kHeaderSize + wire::kHelloPayload];
    wire::encode(hello, frame);
    std::memcpy(frame + wire::kHeaderSize, proof.data(), proof.size());
    std::memcpy(frame + wire::kHeaderSize + proof.size(), ours.data(), ours.size());
    CHECK_EQ(::send(fd_, frame, sizeof(frame), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(frame)));
  }
  // The victim answers ACCEPT, with its own proof of the secret.
  core::auth::Proof expect_accept(const char* what) {
    const std::vector<std::uint8_t> frame = receive(wire::kHeaderSize + wire::kProofPayload);
    CHECK_EQ(frame.size(), wire::kHeaderSize + wire::kProofPayload) << what << ": no whole ACCEPT";
    CHECK(wire::decode(frame.data()).type == wire::FrameType::Accept) << what << ": answered something else";
    core::auth::Proof proof;
    std::memcpy(proof.data(), frame.data() + wire::kHeaderSize, proof.size());
    return proof;
  }
  // The victim answers REFUSED, then closes.
  void expect_refused(const char* what) {
    const std::vector<std::uint8_t> frame = receive(wire::kHeaderSize);
    CHECK_EQ(frame.size(), wire::kHeaderSize) << what << ": no REFUSED frame before the close";
    CHECK(wire::decode(frame.data()).type == wire::FrameType::Refused) << what << ": answered something else";
    CHECK(receive(1).empty()) << what << ": the connection stayed open after REFUSED";
  }

 private:
  int fd_ = -1;
};

// A QP connected to the victim with the wrong secret (or none) fails, saying why.
void qp_must_fail(QueuePair& qp, const std::string& reason) {
  CHECK(eventually([&] { return qp.state() == QpState::Error; }))
      << "a QP whose connection is refused must fail; it is " << to_string(qp.state());
  CHECK(qp.error_reason().find(reason) != std::string::npos)
      << "its reason should say \"" << reason << "\": " << qp.error_reason();
}

// The victim's device and its QP to the attacker. The attacker's own QPs below
// must initiate their connections, and of two tcp devices the one with the
// lower nonce initiates: a victim whose nonce is in the upper half gives each
// device the attacker opens at least an even chance, where a random one would
// leave 64 attempts failing about once in 65.
struct Victim {
  std::shared_ptr<Device> device;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<CompletionQueue> send_cq;
  std::unique_ptr<CompletionQueue> recv_cq;
  std::unique_ptr<QueuePair> qp;
};

Victim open_victim() {
  constexpr std::uint64_t kUpperHalf = std::uint64_t{1} << 63;
  for (int attempt = 0; attempt < 64; ++attempt) {
    Victim v;
    v.device = open_device("tcp");
    v.pd = v.device->alloc_pd();
    v.send_cq = v.device->create_cq(64);
    v.recv_cq = v.device->create_cq(64);
    v.qp = make_qp(*v.device, *v.pd, *v.send_cq, *v.recv_cq);
    if (tcp::TcpAddress::decode(v.qp->local_address()).nonce >= kUpperHalf) return v;
  }
  CHECK(false) << "64 tcp devices in a row had a nonce in the lower half";
  return {};
}

class TcpAuth : public ::testing::TestWithParam<Placement> {
 protected:
  static void TearDownTestSuite() { NetNsPair::destroy(); }
};

TEST_P(TcpAuth, OnlyConnectionsThatProveTheSecretReachAQp) {
  ASSERT_TRUE(run_ranks(2, GetParam(), [](RankEnv& env) {
    ::setenv("RDMX_AUTH_KEY", kSecret, 1);
    ::setenv("RDMX_TIMEOUT", "5", 1);
    const std::string log = env.dir() + "/victim.log";
    if (env.rank() == kVictim) log_to_file(log);  // the victim's log, to check it
    Buffer buf(8192);
    if (env.rank() == kVictim) {
      Victim node = open_victim();
      std::memset(buf.data(), 0, 8192);
      fill_pattern(buf.data(), 4096, 7);
      auto mr = node.pd->register_memory(buf.data(), 4096, Access::LocalWrite | Access::RemoteWrite);
      auto rmr = node.pd->register_memory(buf.data() + 4096, 4096, Access::LocalWrite);
      publish_region(env, "victim", *mr);
      auto& qp = node.qp;
      Sge r1 = rmr->sge(0, 64), r2 = rmr->sge(64, 64);
      qp->post_recv(RecvWr{.wr_id = 1, .sg_list = {&r1, 1}});
      qp->post_recv(RecvWr{.wr_id = 2, .sg_list = {&r2, 1}});
      connect_qp(env, *qp, kAttacker, "good");
      CHECK_WC(WAIT_WC(*node.recv_cq, "the first SEND over the authenticated QP"), "first receive", .wr_id = 1,
               .status = WcStatus::Success);
      await(env, "attacked");
      // Every refusal is logged with where it came from.
      CHECK(eventually([&] { return read_file(log).find("did not verify") != std::string::npos; }))
          << "no refusal in the victim's log:\n"
          << read_file(log);
      const std::string text = read_file(log);
      const std::string attacker_ip = await(env, "attacker-ip");
      CHECK(text.find("refused a connection from " + attacker_ip) != std::string::npos ||
            text.find("refused a connection from [" + attacker_ip + "]") != std::string::npos)
          << "the refusal must name the source address " << attacker_ip << ":\n"
          << text;
      CHECK_EQ(qp->state(), QpState::Rts) << qp->error_reason();
      CHECK_PATTERN(buf.data(), 4096, 7, 0, "the victim's memory after the attacks");
      signal(env, "checked");
      CHECK_WC(WAIT_WC(*node.recv_cq, "the SEND after the attacks"), "second receive", .wr_id = 2,
               .status = WcStatus::Success);
      CHECK_PATTERN(buf.data(), 4096, 8, 0, "the WRITE after the attacks");
      env.barrier("done");
      return;
    }

    // Rank 1: a legitimate peer first.
    Node node(env);
    auto smr = node.pd->register_memory(buf.data(), 8192, Access::LocalWrite);
    auto qp = make_qp(node);
    connect_qp(env, *qp, kVictim, "good");
    Sge s = smr->sge(0, 8);
    qp->post_send(send_wr(10, Opcode::Send, {&s, 1}));
    CHECK_WC(WAIT_WC(*node.send_cq, "the first SEND"), "first SEND", .wr_id = 10, .status = WcStatus::Success);

    const tcp::TcpAddress victim = tcp::TcpAddress::decode(QpAddress::from_hex(env.store().get_string("good/qp/0->1")));
    wire::Header hello = wire::hello_frame({.target_nonce = victim.nonce, .target_qpn = victim.qpn});
    std::uint8_t hello_bytes[wire::kHeaderSize];
    wire::encode(hello, hello_bytes);
    {
      RawConnection forged(victim);
      forged.challenge();
      core::auth::Proof zeros{};
      forged.send_hello(hello, zeros);
      forged.expect_refused("a HELLO with a forged proof");
    }
    {
      // A valid proof, made for another connection's challenge.
      RawConnection first(victim);
      RawConnection second(victim);
      const core::auth::Challenge for_first = first.challenge();
      second.challenge();
      const core::auth::Proof replayed =
          core::auth::prove(wire::kAuthPurpose, for_first, {hello_bytes, sizeof(hello_bytes)});
      second.send_hello(hello, replayed);
      second.expect_refused("a HELLO replaying another connection's proof");
    }
    {
      // A valid proof is answered with the victim's own, over this
      // connection's challenge (bound to the victim's), and for its own
      // purpose: the HELLO's proof could not pass for it.
      RawConnection honest(victim);
      const core::auth::Challenge theirs = honest.challenge();
      const core::auth::Challenge ours = core::auth::new_challenge();
      honest.send_hello(hello, core::auth::prove(wire::kAuthPurpose, theirs, {hello_bytes, sizeof(hello_bytes)}), ours);
      const core::auth::Proof answer = honest.expect_accept("a HELLO with a valid proof");
      CHECK(core::auth::verify(wire::kAcceptPurpose, ours, theirs, answer)) << "the victim's proof does not verify";
      CHECK(!core::auth::verify(wire::kAuthPurpose, ours, theirs, answer)) << "the victim's proof passes for a HELLO's";
    }
    // Through the API: a QP that initiates the connection to the victim's QP
    // (the lower device nonce initiates, so open devices until one has it).
    const std::string victim_address = env.store().get_string("good/qp/0->1");
    auto connect_as_initiator = [&](const std::string& reason) {
      for (int attempt = 0; attempt < 64; ++attempt) {
        auto device = open_device("tcp");
        auto pd = device->alloc_pd();
        auto cq = device->create_cq(16);
        auto attacker_qp = make_qp(*device, *pd, *cq, *cq);
        if (tcp::TcpAddress::decode(attacker_qp->local_address()).nonce > victim.nonce) continue;
        attacker_qp->connect(QpAddress::from_hex(victim_address), {.peer_rank = kVictim});
        qp_must_fail(*attacker_qp, reason);
        return;
      }
      CHECK(false) << "64 devices in a row had a higher nonce than the victim's";
    };
    ::setenv("RDMX_AUTH_KEY", kOtherSecret, 1);
    connect_as_initiator("refused this connection");
    ::unsetenv("RDMX_AUTH_KEY");
    connect_as_initiator("requires a proof of the job secret");
    ::setenv("RDMX_AUTH_KEY", kSecret, 1);
    signal(env, "attacker-ip", env.ip());
    signal(env, "attacked");
    await(env, "checked");
    // The authenticated QP carries on.
    fill_pattern(buf.data() + 4096, 4096, 8);
    RemoteRegion region = fetch_region(env, "victim");
    auto wc = RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, smr->sge(4096, 4096), region.addr, region.rkey, 11);
    CHECK_WC(wc, "WRITE after the attacks", .wr_id = 11, .status = WcStatus::Success);
    qp->post_send(send_wr(12, Opcode::Send, {&s, 1}));
    CHECK_WC(WAIT_WC(*node.send_cq, "the SEND after the attacks"), "second SEND", .wr_id = 12,
             .status = WcStatus::Success);
    env.barrier("done");
  }));
}

INSTANTIATE_TEST_SUITE_P(Placements, TcpAuth, ::testing::Values(Placement::Local, Placement::NetNsIPv4),
                         [](const ::testing::TestParamInfo<Placement>& p) { return std::string(to_string(p.param)); });

}  // namespace
}  // namespace rdmx::test
