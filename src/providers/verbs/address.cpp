// SPDX-License-Identifier: MIT
#include "providers/verbs/address.hpp"

#include <arpa/inet.h>

#include <cstring>

namespace rdmx::verbs {
namespace {
constexpr std::uint8_t kMagic = 'V';
constexpr std::uint8_t kVersion = 1;
constexpr std::size_t kSize = 44;
}  // namespace

const char* to_string(GidType type) noexcept {
  switch (type) {
    case GidType::Ib: return "IB/RoCE v1";
    case GidType::RoceV1: return "RoCE v1";
    case GidType::RoceV2: return "RoCE v2";
  }
  return "unknown";
}

bool is_ipv4_mapped(const std::array<std::uint8_t, 16>& gid) {
  static constexpr std::uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(gid.data(), kPrefix, sizeof(kPrefix)) == 0;
}

std::string gid_to_string(const std::array<std::uint8_t, 16>& gid) {
  char text[INET6_ADDRSTRLEN] = {};
  if (is_ipv4_mapped(gid)) {
    ::inet_ntop(AF_INET, gid.data() + 12, text, sizeof(text));
    return std::string("::ffff:") + text;
  }
  ::inet_ntop(AF_INET6, gid.data(), text, sizeof(text));
  return text;
}

QpAddress VerbsAddress::encode() const {
  QpAddress out;
  out.bytes.resize(kSize);
  auto* b = out.bytes.data();
  b[0] = kMagic;
  b[1] = kVersion;
  b[2] = static_cast<std::uint8_t>(link_layer);
  b[3] = mtu;
  b[4] = port;
  b[5] = rd_atomic;
  b[6] = gid_type;
  b[7] = 0;
  std::memcpy(b + 8, &lid, 2);
  std::memcpy(b + 10, gid.data(), 16);
  std::memcpy(b + 26, &hw_qpn, 4);
  std::memcpy(b + 30, &psn, 4);
  std::memcpy(b + 34, &qpn, 4);
  std::memset(b + 38, 0, kSize - 38);
  return out;
}

bool VerbsAddress::is_verbs(const QpAddress& address) {
  return address.bytes.size() == kSize && address.bytes[0] == kMagic;
}

VerbsAddress VerbsAddress::decode(const QpAddress& address) {
  const auto& b = address.bytes;
  auto reject = [&](const std::string& why) {
    throw Error(ErrorCode::InvalidArgument, "not a valid verbs provider QP address: " + why,
                {.op = "connect",
                 .sizes = "bytes=" + std::to_string(b.size()),
                 .hint = "both QPs must use the verbs provider; pass the peer's local_address() unchanged"});
  };
  if (!is_verbs(address)) reject("wrong size or magic");
  if (b[1] != kVersion) reject("version " + std::to_string(b[1]) + ", this build speaks " + std::to_string(kVersion));
  VerbsAddress a;
  if (b[2] != 1 && b[2] != 2) reject("unknown link layer " + std::to_string(b[2]));
  a.link_layer = static_cast<LinkLayer>(b[2]);
  if (b[3] < 1 || b[3] > 5) reject("MTU code " + std::to_string(b[3]) + " is outside 1..5");
  a.mtu = b[3];
  a.port = b[4];
  a.rd_atomic = b[5];
  if (b[6] > 2) reject("unknown GID type " + std::to_string(b[6]));
  a.gid_type = b[6];
  std::memcpy(&a.lid, b.data() + 8, 2);
  std::memcpy(a.gid.data(), b.data() + 10, 16);
  std::memcpy(&a.hw_qpn, b.data() + 26, 4);
  std::memcpy(&a.psn, b.data() + 30, 4);
  std::memcpy(&a.qpn, b.data() + 34, 4);
  if (a.psn > 0xffffff) reject("PSN does not fit 24 bits");
  if (a.hw_qpn > 0xffffff) reject("QP number does not fit 24 bits");
  return a;
}

std::string VerbsAddress::to_string() const {
  char qp[48];
  std::snprintf(qp, sizeof(qp), " QP 0x%x (rdmx qp %u)", hw_qpn, qpn);
  if (link_layer == LinkLayer::InfiniBand) return "LID " + std::to_string(lid) + qp;
  return "GID " + gid_to_string(gid) + " (" + verbs::to_string(static_cast<GidType>(gid_type)) + ")" + qp;
}

}  // namespace rdmx::verbs
