// SPDX-License-Identifier: MIT
// Authentication is mutual: a tcp QP with the job secret trusts no listener
// that cannot prove it in turn. Rank 1 has the secret and connects, as the
// initiator, to what rank 0 offers:
//   - a real tcp device without the secret (a misconfigured rank);
//   - a squatter (a plain socket on the port, not rdmx) with another secret,
//     that answers the HELLO as an acceptor would, with a proof it can make;
//   - a squatter that asks for no proof at all.
// Each time the QP fails saying which listener and what to check, and the
// squatter receives nothing after the HELLO (no request, no payload).
#include <arpa/inet.h>
#include <netinet/in.h>
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
#include "support/raw_socket.hpp"
#include "support/verbs_util.hpp"
#include "tcp/peers.hpp"

namespace rdmx::test {
namespace {

namespace wire = rdmx::tcp::wire;

constexpr int kListener = 0;
// As the wire documents them (providers/tcp/wire.hpp): the acceptor's answer
// to a HELLO whose proof verified, and the purpose of the proof it carries.
constexpr auto kAcceptFrame = static_cast<wire::FrameType>(15);
constexpr const char* kAcceptPurpose = "rdmx tcp qp accept v3";

void send_frame(int fd, const wire::Header& header, const std::uint8_t* payload, std::size_t bytes) {
  std::uint8_t frame[wire::kHeaderSize + 64];
  wire::encode(header, frame);
  std::memcpy(frame + wire::kHeaderSize, payload, bytes);
  CHECK_EQ(::send(fd, frame, wire::kHeaderSize + bytes, MSG_NOSIGNAL), static_cast<ssize_t>(wire::kHeaderSize + bytes))
      << "squatter: send: " << std::strerror(errno);
}

// Rank 0: a plain socket listener that passes for a tcp device. It sends a
// well-formed CHALLENGE (`key_required` in arg0), reads the HELLO if one
// comes, answers it with an ACCEPT carrying the proof this process can make
// (with its own secret, or zeros without one), and reports to the store
// whether a HELLO came and how many bytes followed it until the QP closed.
void squat(RankEnv& env, const std::string& name, std::uint64_t key_required) {
  const int listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHECK(listen_fd >= 0) << std::strerror(errno);
  tcp::TcpAddress fake;
  auto* in = reinterpret_cast<sockaddr_in*>(&fake.socket);
  in->sin_family = AF_INET;
  CHECK_EQ(::inet_pton(AF_INET, env.ip().c_str(), &in->sin_addr), 1) << env.ip();
  fake.socket_len = sizeof(sockaddr_in);
  CHECK_EQ(::bind(listen_fd, reinterpret_cast<sockaddr*>(&fake.socket), fake.socket_len), 0) << std::strerror(errno);
  CHECK_EQ(::listen(listen_fd, 4), 0);
  CHECK_EQ(::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&fake.socket), &fake.socket_len), 0);
  fake.qpn = 1;
  fake.nonce = ~std::uint64_t{0};  // the highest: the QP connecting to it initiates
  signal(env, name + "/address", fake.encode().to_hex());

  pollfd pfd{listen_fd, POLLIN, 0};
  CHECK_EQ(::poll(&pfd, 1, 20000), 1) << name << ": no connection came";
  const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  CHECK(fd >= 0) << std::strerror(errno);
  const core::auth::Challenge challenge = core::auth::new_challenge();
  wire::Header frame;
  frame.type = wire::FrameType::Challenge;
  frame.length = wire::kChallengePayload;
  frame.arg0 = key_required;
  send_frame(fd, frame, challenge.data(), challenge.size());

  bool hello = false;
  std::string after;
  const std::string header = receive_up_to(fd, wire::kHeaderSize);
  if (header.size() == wire::kHeaderSize) {
    hello = true;
    const wire::Header h = wire::decode(reinterpret_cast<const std::uint8_t*>(header.data()));
    CHECK(h.type == wire::FrameType::Hello && h.length <= 64) << name << ": not a HELLO";
    const std::string payload = receive_up_to(fd, h.length);
    core::auth::Challenge theirs{};
    if (payload.size() >= 64) std::memcpy(theirs.data(), payload.data() + 32, theirs.size());
    const core::auth::Proof proof = core::auth::prove(kAcceptPurpose, theirs, challenge);
    wire::Header accept;
    accept.type = kAcceptFrame;
    accept.length = wire::kProofPayload;
    send_frame(fd, accept, proof.data(), proof.size());
    // Everything the QP sends from here on, until it closes.
    for (std::string more = receive_up_to(fd, 4096); !more.empty(); more = receive_up_to(fd, 4096)) after += more;
  }
  ::close(fd);
  ::close(listen_fd);
  signal(env, name + "/hello", hello ? "1" : "0");
  signal(env, name + "/after", std::to_string(after.size()));
}

// Rank 1: a QP with the secret that connects to `address`, posts a SEND at
// once, and must fail saying `why`, naming the listener and what to check,
// its SEND flushed.
void must_refuse(const QpAddress& address, const std::string& why) {
  const tcp::TcpAddress peer = tcp::TcpAddress::decode(address);
  for (int attempt = 0; attempt < 64; ++attempt) {
    auto device = open_device("tcp");
    auto pd = device->alloc_pd();
    auto cq = device->create_cq(16);
    auto qp = make_qp(*device, *pd, *cq, *cq);
    // The lower device nonce initiates: open devices until this one has it.
    if (tcp::TcpAddress::decode(qp->local_address()).nonce > peer.nonce) continue;
    Buffer buf(64);
    auto mr = pd->register_memory(buf.data(), 64, Access::LocalWrite);
    qp->connect(address, {.peer_rank = kListener});
    Sge s = mr->sge(0, 64);
    qp->post_send(send_wr(7, Opcode::Send, {&s, 1}));
    CHECK(eventually([&] { return qp->state() == QpState::Error; }))
        << "a QP trusted " << peer.to_string() << ", which did not prove the job secret; it is "
        << to_string(qp->state());
    const std::string reason = qp->error_reason();
    for (const std::string& part : {why, peer.to_string(), std::string("the same RDMX_AUTH_KEY"),
                                    std::string("something else may be listening")}) {
      CHECK(reason.find(part) != std::string::npos) << "the reason should say \"" << part << "\": " << reason;
    }
    const WorkCompletion wc = WAIT_WC(*cq, "the SEND posted to a refused listener");
    CHECK(wc.status != WcStatus::Success) << describe(wc);
    return;
  }
  CHECK(false) << "64 devices in a row had a higher nonce than " << peer.to_string();
}

TEST(TcpAuthListener, AQpWithTheSecretTrustsNoListenerThatCannotProveIt) {
  ASSERT_TRUE(run_ranks(2, Placement::Local, [](RankEnv& env) {
    ::setenv("RDMX_TIMEOUT", "5", 1);
    if (env.rank() == kListener) {
      {
        // A real listener started without the secret; its nonce in the upper
        // half, so a device of the connector's has an even chance to initiate.
        ::unsetenv("RDMX_AUTH_KEY");
        std::shared_ptr<Device> device;
        std::unique_ptr<ProtectionDomain> pd;
        std::unique_ptr<CompletionQueue> cq;
        std::unique_ptr<QueuePair> qp;
        for (int attempt = 0; attempt < 64; ++attempt) {
          qp.reset();
          cq.reset();
          pd.reset();
          device = open_device("tcp");
          pd = device->alloc_pd();
          cq = device->create_cq(16);
          qp = make_qp(*device, *pd, *cq, *cq);
          if (tcp::TcpAddress::decode(qp->local_address()).nonce >= (std::uint64_t{1} << 63)) break;
        }
        signal(env, "unkeyed/address", qp->local_address().to_hex());
        await(env, "unkeyed/checked");
      }
      ::setenv("RDMX_AUTH_KEY", kOtherSecret, 1);
      squat(env, "other-secret", 1);
      ::unsetenv("RDMX_AUTH_KEY");
      squat(env, "no-proof", 0);
      env.barrier("done");
      return;
    }

    ::setenv("RDMX_AUTH_KEY", kSecret, 1);
    must_refuse(QpAddress::from_hex(await(env, "unkeyed/address")), "asks for no proof of the job secret");
    signal(env, "unkeyed/checked");

    must_refuse(QpAddress::from_hex(await(env, "other-secret/address")), "did not prove the job secret in return");
    CHECK_EQ(await(env, "other-secret/hello"), "1") << "the QP should have sent its HELLO";
    CHECK_EQ(await(env, "other-secret/after"), "0")
        << "the QP sent bytes after its HELLO to a listener that did not prove the secret";

    must_refuse(QpAddress::from_hex(await(env, "no-proof/address")), "asks for no proof of the job secret");
    CHECK_EQ(await(env, "no-proof/hello"), "0") << "the QP answered a listener that asks for no proof";
    CHECK_EQ(await(env, "no-proof/after"), "0");
    env.barrier("done");
  }));
}

}  // namespace
}  // namespace rdmx::test
