// SPDX-License-Identifier: MIT
#include "providers/tcp/testing.hpp"

#include "providers/tcp/tcp_qp.hpp"

namespace rdmx::tcp::testing {
int socket_fd(QueuePair& qp) {
  auto* tcp = dynamic_cast<TcpQp*>(&qp);
  return tcp == nullptr ? -1 : tcp->socket_fd();
}
}  // namespace rdmx::tcp::testing
