// SPDX-License-Identifier: MIT
// Where a tcp QP can be reached: its device's listening address, its QP
// number and the device instance's nonce, as the bytes of a QpAddress.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>

#include "rdmx/verbs.hpp"

namespace rdmx::tcp {

struct TcpAddress {
  sockaddr_storage socket{};
  socklen_t socket_len = 0;
  std::uint32_t qpn = 0;
  std::uint64_t nonce = 0;
  QpAddress encode() const;
  static TcpAddress decode(const QpAddress& address);  // throws InvalidArgument
  std::string to_string() const;
};

}  // namespace rdmx::tcp
