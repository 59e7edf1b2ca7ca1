// SPDX-License-Identifier: MIT
// Which network interface and address the tcp provider listens on, chosen as
// NCCL_SOCKET_IFNAME does: RDMX_SOCKET_IFNAME is a comma-separated list of
// interface-name prefixes; "^" before the list excludes instead, "=" before
// it asks for exact names. Without it, by reachability rather than by name:
// the interface the kernel routes the job's store address through (the one
// this rank reached the store by, so its peers, who reach the store too,
// share its network); where no launcher names a store or the store is on
// loopback, the first interface that is up and is neither loopback nor
// docker*, falling back to loopback. RDMX_SOCKET_FAMILY (AF_INET or
// AF_INET6) picks the address family; IPv4 is preferred otherwise.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <string>
#include <vector>

namespace rdmx::core {

struct SocketInterface {
  std::string name;  // "eth0"
  sockaddr_storage address{};
  socklen_t address_len = 0;
  std::string why;  // how it was chosen
  // Interfaces the name rule would have taken first, and why they were not.
  struct Skipped {
    std::string name;
    std::string address;
    std::string reason;
  };
  std::vector<Skipped> skipped;
};

// Throws rdmx::Error (Config/NotFound) naming the variables and interfaces seen.
SocketInterface choose_interface();

// "10.0.0.1:4242" / "[fd00::1]:4242"
std::string format_address(const sockaddr* address);
// "10.0.0.1" / "fd00::1%2": the same without the port and brackets.
std::string format_host(const sockaddr* address);

}  // namespace rdmx::core
