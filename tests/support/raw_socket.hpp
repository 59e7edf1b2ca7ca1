// SPDX-License-Identifier: MIT
// Reading a raw socket in tests that play a peer or server byte by byte.
#pragma once

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <string>

namespace rdmx::test {

// Reads up to `n` bytes within 5 s; fewer when the other end closes first.
inline std::string receive_up_to(int fd, std::size_t n) {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (out.size() < n && std::chrono::steady_clock::now() < deadline) {
    pollfd pfd{.fd = fd, .events = POLLIN, .revents = 0};
    if (::poll(&pfd, 1, 100) <= 0) continue;
    char buffer[256];
    const ssize_t r = ::recv(fd, buffer, std::min(sizeof(buffer), n - out.size()), 0);
    if (r <= 0) break;
    out.append(buffer, static_cast<std::size_t>(r));
  }
  return out;
}

}  // namespace rdmx::test
