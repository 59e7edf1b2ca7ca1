// SPDX-License-Identifier: MIT
// Which network interface and address the tcp provider listens on, chosen as
// NCCL_SOCKET_IFNAME does: RDMX_SOCKET_IFNAME is a comma-separated list of
// interface-name prefixes; "^" before the list excludes instead, "=" before
// it asks for exact names. Without it, the first interface that is up and is
// neither loopback nor docker*, falling back to loopback. RDMX_SOCKET_FAMILY
// (AF_INET or AF_INET6) picks the address family; IPv4 is preferred otherwise.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <string>

namespace rdmx::core {

struct SocketInterface {
  std::string name;  // "eth0"
  sockaddr_storage address{};
  socklen_t address_len = 0;
  std::string why;  // how it was chosen
};

// Throws rdmx::Error (Config/NotFound) naming the variables and interfaces seen.
SocketInterface choose_interface();

// "10.0.0.1:4242" / "[fd00::1]:4242"
std::string format_address(const sockaddr* address);

}  // namespace rdmx::core
