// SPDX-License-Identifier: MIT
// tcp provider robustness: bytes that are not a valid frame, written straight
// into one QP's socket by the peer process, put that QP (on the receiving
// side) in ERROR with a reason, and nothing else: the attacked process
// survives, its memory is untouched, its other QPs keep working, and it still
// accepts new connections.
//
// Rank 0 is the victim, rank 1 the attacker. Both run over every placement.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ostream>
#include <random>
#include <vector>

#include "providers/tcp/testing.hpp"
#include "providers/tcp/wire.hpp"
#include "support/harness.hpp"
#include "support/verbs_util.hpp"
#include "tcp/peers.hpp"

namespace rdmx::test {
namespace {

namespace wire = rdmx::tcp::wire;

enum class Attack {
  RandomBytes,       // 64 KiB from a fixed-seed PRNG
  ZeroBytes,         // 4 KiB of zeros (magic 0)
  WrongMagic,        // a well-formed header with the wrong magic
  WrongVersion,      // right magic, version 99
  UnknownFrameType,  // right magic and version, type 200
  UnknownFlags,      // an Ack with undefined flag bits
  OversizedChunk,    // a WRITE chunk claiming 4 GiB - 16 bytes of payload
  HugeMessage,       // a SEND whose total length is 1 TiB
  TruncatedHeader,   // 20 bytes of a valid header, then the attacker shuts down its side
  TruncatedPayload,  // a SEND header announcing 40 bytes, 10 sent, then shut down
};

const char* to_string(Attack a) {
  switch (a) {
    case Attack::RandomBytes: return "RandomBytes";
    case Attack::ZeroBytes: return "ZeroBytes";
    case Attack::WrongMagic: return "WrongMagic";
    case Attack::WrongVersion: return "WrongVersion";
    case Attack::UnknownFrameType: return "UnknownFrameType";
    case Attack::UnknownFlags: return "UnknownFlags";
    case Attack::OversizedChunk: return "OversizedChunk";
    case Attack::HugeMessage: return "HugeMessage";
    case Attack::TruncatedHeader: return "TruncatedHeader";
    case Attack::TruncatedPayload: return "TruncatedPayload";
  }
  return "?";
}

// A word the victim's error_reason() must contain (case-insensitive), so the
// reason names the problem rather than a generic failure.
const char* expected_reason(Attack a) {
  switch (a) {
    case Attack::RandomBytes:
    case Attack::ZeroBytes:
    case Attack::WrongMagic: return "magic";
    case Attack::WrongVersion: return "version";
    case Attack::UnknownFrameType: return "frame type";
    case Attack::UnknownFlags: return "flag";
    case Attack::OversizedChunk: return "chunk";
    case Attack::HugeMessage: return "length";
    case Attack::TruncatedHeader:
    case Attack::TruncatedPayload: return "closed";
  }
  return "";
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::uint8_t> header_bytes(const wire::Header& h) {
  std::vector<std::uint8_t> out(wire::kHeaderSize);
  wire::encode(h, out.data());
  return out;
}

// What the attacker writes, and whether it then shuts down its sending side.
struct Payload {
  std::vector<std::uint8_t> bytes;
  bool shutdown_after = false;
};

Payload make_payload(Attack attack) {
  Payload p;
  // msn 1 is what the victim expects next (the warm-up SEND was msn 0), so each
  // attack is refused for the field it is about, not for its sequence number.
  wire::Header h;
  h.msn = 1;
  switch (attack) {
    case Attack::RandomBytes: {
      std::mt19937_64 rng(0x5EED5EEDull);
      p.bytes.resize(64 * 1024);
      for (auto& b : p.bytes) b = static_cast<std::uint8_t>(rng());
      // Make sure the very first header cannot be mistaken for a valid one.
      if (p.bytes[0] == (wire::kMagic & 0xff)) p.bytes[0] ^= 0xff;
      break;
    }
    case Attack::ZeroBytes: p.bytes.assign(4096, 0); break;
    case Attack::WrongMagic:
      h.magic = 0x12345678;
      h.type = wire::FrameType::Ack;
      p.bytes = header_bytes(h);
      break;
    case Attack::WrongVersion:
      h.version = 99;
      h.type = wire::FrameType::Ack;
      p.bytes = header_bytes(h);
      break;
    case Attack::UnknownFrameType:
      h.type = static_cast<wire::FrameType>(200);
      p.bytes = header_bytes(h);
      break;
    case Attack::UnknownFlags:
      h.type = wire::FrameType::Ack;
      h.flags = 0x8000;
      p.bytes = header_bytes(h);
      break;
    case Attack::OversizedChunk:
      h.type = wire::FrameType::WriteReq;
      h.flags = wire::kFirst | wire::kLast;
      h.length = 0xFFFFFFF0u;
      h.arg0 = 0xFFFFFFF0u;
      h.rkey = 0x1234;
      h.addr = 0x10000;
      p.bytes = header_bytes(h);
      break;
    case Attack::HugeMessage: {
      h.type = wire::FrameType::SendReq;
      h.flags = wire::kFirst;
      h.length = 16;
      h.arg0 = 1ull << 40;
      p.bytes = header_bytes(h);
      p.bytes.resize(p.bytes.size() + 16, 0xAB);
      break;
    }
    case Attack::TruncatedHeader:
      h.type = wire::FrameType::Ack;
      p.bytes = header_bytes(h);
      p.bytes.resize(20);
      p.shutdown_after = true;
      break;
    case Attack::TruncatedPayload:
      h.type = wire::FrameType::SendReq;
      h.flags = wire::kFirst | wire::kLast;
      h.length = 40;  // fits the victim's 64-byte receive
      h.arg0 = 40;
      p.bytes = header_bytes(h);
      p.bytes.resize(p.bytes.size() + 10, 0xCD);
      p.shutdown_after = true;
      break;
  }
  return p;
}

void send_all(int fd, const std::vector<std::uint8_t>& bytes) {
  std::size_t sent = 0;
  const auto deadline = std::chrono::steady_clock::now() + default_timeout();
  while (sent < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      CHECK(std::chrono::steady_clock::now() < deadline) << "writing the garbage: socket stayed full";
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 100);
      continue;
    }
    // The victim may already have dropped the connection part way through a
    // large payload: that is a valid reaction.
    CHECK(sent > 0) << "writing garbage into the QP socket failed at once: " << std::strerror(errno);
    std::fprintf(stderr, "[rank %d] victim closed the connection after %zu of %zu garbage bytes (%s)\n", current_rank(),
                 sent, bytes.size(), std::strerror(errno));
    return;
  }
}

struct GarbageParam {
  Placement placement;
  Attack attack;
};
void PrintTo(const GarbageParam& p, std::ostream* os) { *os << to_string(p.attack) << "_" << to_string(p.placement); }

class TcpGarbage : public ::testing::TestWithParam<GarbageParam> {
 protected:
  static void TearDownTestSuite() { NetNsPair::destroy(); }
};

TEST_P(TcpGarbage, BreaksOnlyTheAttackedQp) {
  const Attack attack = GetParam().attack;
  Options options;
  options.provider = "tcp";
  ASSERT_TRUE(run_ranks(
      2, GetParam().placement,
      [attack](RankEnv& env) {
        Node node(env);
        Device& dev = *node.device;
        auto cq1 = dev.create_cq(64);
        auto cq2 = dev.create_cq(64);
        auto cq3 = dev.create_cq(64);
        Buffer buf(65536);
        if (env.rank() == kVictim) {
          fill_pattern(buf.data(), 32768, 201);
          std::memset(buf.data() + 32768, 0, 32768);
          auto mr = node.pd->register_memory(buf.data(), 32768,
                                             Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead);
          auto lmr = node.pd->register_memory(buf.data() + 32768, 32768, Access::LocalWrite);
          publish_region(env, "victim-region", *mr);
          auto qp1 = make_qp(dev, *node.pd, *cq1, *cq1);
          Sge r1 = lmr->sge(0, 64), r2 = lmr->sge(64, 64);
          qp1->post_recv(RecvWr{.wr_id = 11, .sg_list = {&r1, 1}});
          qp1->post_recv(RecvWr{.wr_id = 12, .sg_list = {&r2, 1}});
          connect_qp(env, *qp1, kAttacker, "q1");
          auto qp2 = make_qp(dev, *node.pd, *cq2, *cq2);
          Sge r3 = lmr->sge(128, 64);
          qp2->post_recv(RecvWr{.wr_id = 21, .sg_list = {&r3, 1}});
          connect_qp(env, *qp2, kAttacker, "q2");
          CHECK_WC(WAIT_WC(*cq1, "warm-up SEND on the QP to be attacked"), "warm-up receive", .wr_id = 11,
                   .status = WcStatus::Success, .opcode = WcOpcode::Recv, .byte_len = 8);
          signal(env, "armed");

          // The attacked QP fails: its posted receive is flushed.
          auto wc = WAIT_WC(*cq1, std::string("the attacked QP to fail after ") + to_string(attack));
          CHECK_WC(wc, std::string("receive on the QP attacked with ") + to_string(attack), .wr_id = 12,
                   .status = WcStatus::WrFlushErr, .qp_num = qp1->qp_num());
          CHECK_EQ(qp1->state(), QpState::Error);
          const std::string reason = qp1->error_reason();
          CHECK(!reason.empty()) << "the attacked QP must say why it failed";
          std::fprintf(stderr, "[victim] %s -> error_reason: %s\n", to_string(attack), reason.c_str());
          CHECK(lower(reason).find(expected_reason(attack)) != std::string::npos)
              << "error_reason after " << to_string(attack) << " should mention \"" << expected_reason(attack)
              << "\": " << reason;
          CHECK_EQ(qp2->state(), QpState::Rts)
              << "the other QP must be unaffected (reason: " << qp2->error_reason() << ")";
          CHECK_PATTERN(buf.data(), 32768, 201, 0, "victim's registered memory after the garbage");
          signal(env, "detected");

          // The other QP still works both ways.
          CHECK_WC(WAIT_WC(*cq2, "SEND after the WRITE on the healthy QP"), "receive on the healthy QP", .wr_id = 21,
                   .status = WcStatus::Success, .opcode = WcOpcode::Recv, .byte_len = 8);
          CHECK_PATTERN(buf.data(), 32768, 202, 0, "WRITE on the healthy QP after the attack");
          RemoteRegion theirs = fetch_region(env, "attacker-region");
          auto rd = RDMA_SYNC(*qp2, *cq2, Opcode::RdmaRead, lmr->sge(4096, 4096), theirs.addr, theirs.rkey, 22);
          CHECK_WC(rd, "READ on the healthy QP after the attack", .wr_id = 22, .status = WcStatus::Success,
                   .byte_len = 4096);
          CHECK_PATTERN(buf.data() + 32768 + 4096, 4096, 203, 0, "READ on the healthy QP after the attack");

          // And the device still accepts new connections.
          auto qp3 = make_qp(dev, *node.pd, *cq3, *cq3);
          Sge r4 = lmr->sge(192, 64);
          qp3->post_recv(RecvWr{.wr_id = 31, .sg_list = {&r4, 1}});
          connect_qp(env, *qp3, kAttacker, "q3");
          CHECK_WC(WAIT_WC(*cq3, "SEND on a QP connected after the attack"), "receive on a new QP", .wr_id = 31,
                   .status = WcStatus::Success, .byte_len = 8);
          env.barrier("done");
        } else {
          fill_pattern(buf.data(), 32768, 202);
          fill_pattern(buf.data() + 32768, 32768, 203);
          auto mr = node.pd->register_memory(buf.data(), 32768, Access::LocalWrite);
          auto rmr = node.pd->register_memory(buf.data() + 32768, 32768, Access::LocalWrite | Access::RemoteRead);
          publish_region(env, "attacker-region", *rmr);
          auto qp1 = connected_qp(env, node, kVictim, "q1");  // on the Node's CQs
          auto qp2 = make_qp(dev, *node.pd, *cq2, *cq2);
          connect_qp(env, *qp2, kVictim, "q2");
          Sge s = mr->sge(0, 8);
          qp1->post_send(send_wr(1, Opcode::Send, {&s, 1}));
          CHECK_WC(WAIT_WC(*node.send_cq, "warm-up SEND"), "warm-up SEND", .wr_id = 1, .status = WcStatus::Success);
          await(env, "armed");

          int fd = rdmx::tcp::testing::socket_fd(*qp1);
          CHECK_GE(fd, 0) << "socket_fd() of a connected tcp QP";
          Payload payload = make_payload(attack);
          send_all(fd, payload.bytes);
          if (payload.shutdown_after) ::shutdown(fd, SHUT_WR);
          await(env, "detected");

          RemoteRegion victim = fetch_region(env, "victim-region");
          auto w = RDMA_SYNC(*qp2, *cq2, Opcode::RdmaWrite, mr->sge(0, 32768), victim.addr, victim.rkey, 2);
          CHECK_WC(w, "WRITE on the healthy QP", .wr_id = 2, .status = WcStatus::Success);
          qp2->post_send(send_wr(3, Opcode::Send, {&s, 1}));
          CHECK_WC(WAIT_WC(*cq2, "SEND on the healthy QP"), "SEND on the healthy QP", .wr_id = 3,
                   .status = WcStatus::Success);
          auto qp3 = make_qp(dev, *node.pd, *cq3, *cq3);
          connect_qp(env, *qp3, kVictim, "q3");
          qp3->post_send(send_wr(4, Opcode::Send, {&s, 1}));
          CHECK_WC(WAIT_WC(*cq3, "SEND on a new QP"), "SEND on a QP connected after the attack", .wr_id = 4,
                   .status = WcStatus::Success);
          env.barrier("done");
        }
      },
      options));
}

std::vector<GarbageParam> garbage_params() {
  std::vector<GarbageParam> out;
  for (Placement p : {Placement::Local, Placement::NetNsIPv4, Placement::NetNsIPv6}) {
    for (Attack a : {Attack::RandomBytes, Attack::ZeroBytes, Attack::WrongMagic, Attack::WrongVersion,
                     Attack::UnknownFrameType, Attack::UnknownFlags, Attack::OversizedChunk, Attack::HugeMessage,
                     Attack::TruncatedHeader, Attack::TruncatedPayload}) {
      out.push_back({p, a});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Attacks, TcpGarbage, ::testing::ValuesIn(garbage_params()),
                         [](const ::testing::TestParamInfo<GarbageParam>& p) {
                           return std::string(to_string(p.param.attack)) + "_" + to_string(p.param.placement);
                         });

// The tcp device binds the interface the harness selected (RDMX_SOCKET_IFNAME)
// with the requested family (RDMX_SOCKET_FAMILY), and says so.
class TcpPlacement : public ::testing::TestWithParam<Placement> {
 protected:
  static void TearDownTestSuite() { NetNsPair::destroy(); }
};

TEST_P(TcpPlacement, DeviceUsesTheSelectedInterface) {
  ASSERT_TRUE(run_ranks(2, GetParam(), [](RankEnv& env) {
    Device& dev = env.device();
    const std::string name = dev.name();
    std::fprintf(stderr, "[rank %d] device %s (%s)\n", env.rank(), name.c_str(), dev.selection_reason().c_str());
    CHECK(name.find(env.ifname()) != std::string::npos)
        << "device name \"" << name << "\" does not name interface " << env.ifname();
    CHECK(name.find(env.ip()) != std::string::npos)
        << "device name \"" << name << "\" does not show address " << env.ip();
    CHECK(!dev.selection_reason().empty());
    CHECK(dev.caps().remote_peers);
    CHECK(dev.caps().same_host_peers);
  }));
}

INSTANTIATE_TEST_SUITE_P(Placements, TcpPlacement,
                         ::testing::Values(Placement::Local, Placement::NetNsIPv4, Placement::NetNsIPv6),
                         [](const ::testing::TestParamInfo<Placement>& p) { return std::string(to_string(p.param)); });

}  // namespace
}  // namespace rdmx::test
