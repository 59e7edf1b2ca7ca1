// SPDX-License-Identifier: MIT
// How a software RC device and its QPs meet a new connection: the device
// accepts it on its listening socket and keeps it until the HELLO names a
// QP, which takes it (now, or when connect() runs) or refuses it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "services/wait.hpp"

namespace rdmx::core {

// epoll tags: kind in the high 32 bits, id (fd or qpn) in the low ones.
enum class Watch : std::uint32_t { Listener = 1, Pending = 2, Qp = 3, Wake = 4, Linger = 5 };
inline std::uint64_t watch_tag(Watch kind, std::uint32_t id) { return (static_cast<std::uint64_t>(kind) << 32) | id; }

// The numbers a HELLO names a connection by, as its sender states them:
// the QP it wants on which device instance, and its own.
struct ConnectionIds {
  std::uint64_t target_nonce = 0;  // of the device the HELLO is for
  std::uint32_t target_qpn = 0;
  std::uint32_t source_qpn = 0;
  std::uint64_t source_nonce = 0;  // of the device the HELLO comes from
};

// An accepted connection until the QP its HELLO names takes it.
struct PendingConnection {
  int fd = -1;
  int carried_fd = -1;    // a descriptor that came with the HELLO (shm: the segment)
  std::string peer;       // where it came from, when the transport can say
  bool complete = false;  // the HELLO was read and checked
  ConnectionIds ids;      // from the HELLO, once complete
  Clock::time_point accepted_at;
  std::array<std::uint8_t, 32> challenge{};  // what the HELLO's proof must answer (tcp)
  std::array<std::uint8_t, 128> hello{};     // its bytes, as far as they arrived
  std::size_t got = 0;
};

// What a QP says when offered a pending connection.
enum class Offer { Taken, NotYet, Refused };

}  // namespace rdmx::core
