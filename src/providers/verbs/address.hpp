// SPDX-License-Identifier: MIT
// A verbs QP's address: what a peer needs to move its QP to RTR towards ours
// (LID or GID, QP number, first PSN, MTU, responder resources), in a fixed,
// versioned, validated layout.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "rdmx/verbs.hpp"

namespace rdmx::verbs {

enum class LinkLayer : std::uint8_t { InfiniBand = 1, Ethernet = 2 };

struct VerbsAddress {
  LinkLayer link_layer = LinkLayer::InfiniBand;
  std::uint8_t mtu = 0;  // the port's active MTU (enum ibv_mtu: 1=256 .. 5=4096)
  std::uint8_t port = 0;
  std::uint8_t rd_atomic = 0;  // READ/atomic requests this QP answers at once (max_dest_rd_atomic)
  std::uint8_t gid_type = 0;   // GidType of `gid` (Ethernet: RoCE v1 or v2)
  std::uint16_t lid = 0;       // InfiniBand
  std::array<std::uint8_t, 16> gid{};
  std::uint32_t hw_qpn = 0;  // the device's QP number
  std::uint32_t psn = 0;     // first packet sequence number (24 bits)
  std::uint32_t qpn = 0;     // rdmx's QP number (logs only)

  QpAddress encode() const;
  // Throws InvalidArgument when `address` is not a well-formed verbs address.
  static VerbsAddress decode(const QpAddress& address);
  static bool is_verbs(const QpAddress& address);
  // "rxe0 LID 3 QP 0x11" / "GID ::ffff:10.0.0.1 (RoCE v2) QP 0x11".
  std::string to_string() const;
};

enum class GidType : std::uint8_t { Ib = 0, RoceV1 = 1, RoceV2 = 2 };
const char* to_string(GidType type) noexcept;
// "fe80::ff:fe00:1", or "::ffff:10.77.0.1" for an IPv4-mapped GID.
std::string gid_to_string(const std::array<std::uint8_t, 16>& gid);
bool is_ipv4_mapped(const std::array<std::uint8_t, 16>& gid);

}  // namespace rdmx::verbs
