// SPDX-License-Identifier: MIT
// Where a shm QP can be reached, and whether a peer shares this host.
//
// Same host is decided by the kernel's boot id (a host name can repeat, a
// boot id cannot) and the PID namespace (cross-memory attach names processes
// by PID); a handshake over the peer's Unix socket then proves that the
// shared segment and cross-memory attach work.
#pragma once

#include <cstdint>
#include <string>

#include "rdmx/verbs.hpp"

namespace rdmx::shm {

struct HostIdentity {
  std::string boot_id;              // /proc/sys/kernel/random/boot_id
  std::uint64_t pid_namespace = 0;  // inode of /proc/self/ns/pid
  static const HostIdentity& self();
};

struct ShmAddress {
  std::string boot_id;
  std::uint64_t pid_namespace = 0;
  std::uint32_t pid = 0;
  std::uint32_t qpn = 0;
  std::uint64_t nonce = 0;  // the device instance
  std::string socket_path;  // the device's listening Unix socket

  QpAddress encode() const;
  static bool is_shm(const QpAddress& address);
  static ShmAddress decode(const QpAddress& address);  // throws InvalidArgument
  std::string to_string() const;                       // "pid 123 qp 4"
};

// Whether a process with this address can be reached through shared memory
// from here; when not, `why` says what differs.
bool reachable(const ShmAddress& peer, std::string* why);

}  // namespace rdmx::shm
