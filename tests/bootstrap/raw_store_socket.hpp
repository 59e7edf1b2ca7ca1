// SPDX-License-Identifier: MIT
// Raw TCP connections to a store server, for sending what no client would
// (malformed, replayed, half-sent or flooding requests), and the encoders
// of the wire format (docs/BOOTSTRAP.md) those bytes are written with.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>

#include "services/auth.hpp"
#include "support/raw_socket.hpp"

namespace rdmx::test {

// A connected TCP socket to 127.0.0.1:port; throws when refused.
inline int raw_connect(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    throw std::runtime_error("raw connect failed");
  }
  return fd;
}

// True when the server closes `fd` within `bound` (bytes before the close are read and dropped).
inline bool closed_within(int fd, std::chrono::milliseconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd pfd{.fd = fd, .events = POLLIN, .revents = 0};
    if (::poll(&pfd, 1, 50) <= 0) continue;
    char buffer[256];
    const ssize_t r = ::recv(fd, buffer, sizeof(buffer), 0);
    if (r == 0 || (r < 0 && errno == ECONNRESET)) return true;
  }
  return false;
}

// The fixed part every authentication frame starts with (`flag`: the challenge's "a secret is required").
inline std::string auth_head(std::uint8_t flag = 0) {
  return std::string("RDXA") + std::string(1, '\3') + std::string(1, static_cast<char>(flag)) + std::string(2, '\0');
}

inline core::auth::Challenge challenge_of(const std::string& frame) {
  core::auth::Challenge c;
  std::memcpy(c.data(), frame.data() + 8, c.size());
  return c;
}

// The 32 bytes after an authentication frame's head: the server's proof in a verdict.
inline core::auth::Proof proof_of(const std::string& frame) {
  core::auth::Proof p;
  std::memcpy(p.data(), frame.data() + 8, p.size());
  return p;
}

// The client's proof, and the challenge the server's proof must answer.
inline std::string proof_frame(const core::auth::Proof& proof, const core::auth::Challenge& challenge = {}) {
  return auth_head() + std::string(reinterpret_cast<const char*>(proof.data()), proof.size()) +
         std::string(reinterpret_cast<const char*>(challenge.data()), challenge.size());
}

// Little-endian encoders matching the documented wire format.
inline std::string le32(std::uint32_t v) {
  std::string out;
  for (int i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}
inline std::string le64(std::uint64_t v) {
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}
constexpr std::uint8_t kStoreWireVersion = 3;
inline std::string request_header(std::uint8_t version, std::uint8_t op, std::uint32_t nargs) {
  return le32(0x53584452) + std::string(1, static_cast<char>(version)) + std::string(1, static_cast<char>(op)) +
         std::string(2, '\0') + le64(1) + le64(static_cast<std::uint64_t>(-1)) + le32(nargs);
}

// A raw connection. Unless told not to, it first passes the handshake as a
// client would (with this process's secret, or none), so what it sends
// next reaches the request parser.
class RawSocket {
 public:
  explicit RawSocket(std::uint16_t port, bool authenticate = true) : fd_(raw_connect(port)) {
    if (!authenticate) return;
    const std::string challenge = receive_exact(40);
    send_bytes(proof_frame(core::auth::prove("rdmx tcp store v3", challenge_of(challenge))));
    const std::string verdict = receive_exact(40);
    if (verdict[5] != 1) throw std::runtime_error("the store refused the raw socket's proof");
  }
  ~RawSocket() { ::close(fd_); }
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;

  int fd() const { return fd_; }
  // Exactly `n` bytes (or throws within 5 s).
  std::string receive_exact(std::size_t n) {
    std::string out = receive_up_to(fd_, n);
    if (out.size() != n) throw std::runtime_error("raw socket: closed or silent after " + std::to_string(out.size()));
    return out;
  }
  void send_bytes(const std::string& bytes) {
    ASSERT_EQ(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
  }
  // Sends what the socket takes of `bytes` from `offset` without blocking; returns the new offset.
  std::size_t send_some(const std::string& bytes, std::size_t offset) {
    const ssize_t n = ::send(fd_, bytes.data() + offset, bytes.size() - offset, MSG_NOSIGNAL | MSG_DONTWAIT);
    return n > 0 ? offset + static_cast<std::size_t>(n) : offset;
  }
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }
  // True when the server closes the connection within `timeout`.
  bool closed_by_server(std::chrono::milliseconds timeout) { return closed_within(fd_, timeout); }

 private:
  int fd_;
};

}  // namespace rdmx::test
