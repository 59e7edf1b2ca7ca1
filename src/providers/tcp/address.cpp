// SPDX-License-Identifier: MIT
#include "providers/tcp/address.hpp"

#include <netinet/in.h>

#include <cstring>

#include "providers/tcp/tcp_factory.hpp"
#include "services/socket_iface.hpp"

namespace rdmx::tcp {
using core::format_address;
namespace {

constexpr std::uint8_t kAddressMagic = 'T';
constexpr std::uint8_t kAddressVersion = 1;
constexpr std::size_t kAddressSize = 38;

}  // namespace

QpAddress TcpAddress::encode() const {
  QpAddress out;
  out.bytes.assign(kAddressSize, 0);
  auto* b = out.bytes.data();
  b[0] = kAddressMagic;
  b[1] = kAddressVersion;
  if (socket.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&socket);
    b[2] = 4;
    std::memcpy(b + 4, &a->sin_port, 2);
    std::memcpy(b + 6, &a->sin_addr, 4);
  } else {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&socket);
    b[2] = 6;
    std::memcpy(b + 4, &a->sin6_port, 2);
    std::memcpy(b + 6, &a->sin6_addr, 16);
    std::memcpy(b + 22, &a->sin6_scope_id, 4);
  }
  std::memcpy(b + 26, &qpn, 4);
  std::memcpy(b + 30, &nonce, 8);
  return out;
}

TcpAddress TcpAddress::decode(const QpAddress& address) {
  const auto& b = address.bytes;
  if (b.size() != kAddressSize || b[0] != kAddressMagic || b[1] != kAddressVersion || (b[2] != 4 && b[2] != 6)) {
    throw Error(ErrorCode::InvalidArgument, "not a tcp provider QP address",
                {.op = "connect",
                 .sizes = "bytes=" + std::to_string(b.size()),
                 .hint = "both QPs must use the tcp provider; pass the peer's local_address() unchanged"});
  }
  TcpAddress out;
  if (b[2] == 4) {
    auto* a = reinterpret_cast<sockaddr_in*>(&out.socket);
    a->sin_family = AF_INET;
    std::memcpy(&a->sin_port, b.data() + 4, 2);
    std::memcpy(&a->sin_addr, b.data() + 6, 4);
    out.socket_len = sizeof(sockaddr_in);
  } else {
    auto* a = reinterpret_cast<sockaddr_in6*>(&out.socket);
    a->sin6_family = AF_INET6;
    std::memcpy(&a->sin6_port, b.data() + 4, 2);
    std::memcpy(&a->sin6_addr, b.data() + 6, 16);
    std::memcpy(&a->sin6_scope_id, b.data() + 22, 4);
    out.socket_len = sizeof(sockaddr_in6);
  }
  std::memcpy(&out.qpn, b.data() + 26, 4);
  std::memcpy(&out.nonce, b.data() + 30, 8);
  return out;
}

bool is_tcp_address(const QpAddress& address) {
  try {
    TcpAddress::decode(address);
    return true;
  } catch (const Error&) {
    return false;
  }
}

std::string TcpAddress::to_string() const {
  return format_address(reinterpret_cast<const sockaddr*>(&socket)) + "/qp" + std::to_string(qpn);
}

}  // namespace rdmx::tcp
