// SPDX-License-Identifier: MIT
#include "driver/address_bundle.hpp"

namespace rdmx::core {
namespace {
constexpr std::uint8_t kMagic = 'A';
constexpr std::uint8_t kVersion = 1;
}  // namespace

QpAddress bundle_addresses(const std::vector<QpAddress>& parts) {
  QpAddress out;
  out.bytes = {kMagic, kVersion, static_cast<std::uint8_t>(parts.size())};
  for (const auto& p : parts) {
    auto len = static_cast<std::uint16_t>(p.bytes.size());
    out.bytes.push_back(static_cast<std::uint8_t>(len & 0xff));
    out.bytes.push_back(static_cast<std::uint8_t>(len >> 8));
    out.bytes.insert(out.bytes.end(), p.bytes.begin(), p.bytes.end());
  }
  return out;
}

std::vector<QpAddress> unbundle_addresses(const QpAddress& address) {
  const auto& b = address.bytes;
  if (b.size() < 3 || b[0] != kMagic || b[1] != kVersion) return {address};
  std::vector<QpAddress> parts;
  std::size_t at = 3;
  for (std::uint8_t i = 0; i < b[2]; ++i) {
    if (at + 2 > b.size()) break;
    std::size_t len = b[at] | (static_cast<std::size_t>(b[at + 1]) << 8);
    at += 2;
    if (at + len > b.size()) break;
    parts.push_back(
        QpAddress{{b.begin() + static_cast<std::ptrdiff_t>(at), b.begin() + static_cast<std::ptrdiff_t>(at + len)}});
    at += len;
  }
  if (parts.size() != b[2] || at != b.size()) {
    throw Error(ErrorCode::InvalidArgument, "malformed multi-provider QP address",
                {.op = "connect",
                 .sizes = "bytes=" + std::to_string(b.size()),
                 .hint = "pass the peer's local_address() unchanged"});
  }
  return parts;
}

QpAddress part_for_provider(const QpAddress& address, const std::function<bool(const QpAddress&)>& mine) {
  for (const auto& part : unbundle_addresses(address)) {
    if (mine(part)) return part;
  }
  return address;
}

}  // namespace rdmx::core
