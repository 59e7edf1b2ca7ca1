// SPDX-License-Identifier: MIT
// Which ports this process's listeners take (tcp QPs, the control mesh,
// rdmx doctor): any the kernel gives, or, with RDMX_PORT_RANGE, only those
// of a range that a cluster's firewall leaves open, as Gloo's and MPI's
// port-range settings do.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>

namespace rdmx::core {

struct PortRange {
  std::uint16_t first = 0;  // 0: any port
  std::uint16_t last = 0;
  bool any() const { return first == 0; }
  std::string text() const;  // "40000-40999" or "any"
};

// RDMX_PORT_RANGE as read now; throws Error(Config) when malformed.
PortRange port_range();

// Binds `fd` to `address` (its port ignored) on a port of `range`, trying
// them from a random one on so that the ranks of a host rarely collide.
// Returns 0, or the errno of the last attempt (EADDRINUSE: all taken).
int bind_in_port_range(int fd, const sockaddr_storage& address, socklen_t length, const PortRange& range);

}  // namespace rdmx::core
