// SPDX-License-Identifier: MIT
// Fuzz target: the TCP store client's reading of a server's bytes. A fake
// server on loopback passes the client's handshake (challenge, verdict and
// the hello answer), then answers the client's get with the input and
// closes. The client must return a value or throw rdmx::Error: never crash,
// hang or read past what arrived.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>

#include "bootstrap/tcp_store_protocol.hpp"
#include "rdmx/bootstrap.hpp"
#include "rdmx/error.hpp"

namespace {

using namespace rdmx::bootstrap;

int listener(std::uint16_t& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 || ::listen(fd, 16) != 0)
    __builtin_trap();
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  port = ntohs(address.sin_port);
  return fd;
}

// Reads what the client sends until `bytes` arrived or 1 s passed.
void read_some(int fd, std::size_t bytes) {
  char sink[4096];
  std::size_t got = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (got < bytes && std::chrono::steady_clock::now() < deadline) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, 50) <= 0) continue;
    const ssize_t n = ::recv(fd, sink, sizeof(sink), 0);
    if (n <= 0) return;
    got += static_cast<std::size_t>(n);
  }
}

void send_all(int fd, const std::string& bytes) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += static_cast<std::size_t>(n);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ::unsetenv("RDMX_AUTH_KEY");
  ::unsetenv("RDMX_AUTH_KEY_FILE");
  static std::uint16_t port = 0;
  static const int listen_fd = listener(port);
  const std::string answer(reinterpret_cast<const char*>(data), size);
  std::thread server([&] {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    std::string challenge = wire::auth_frame_head(0) + std::string(32, 'c');
    send_all(fd, challenge);
    // The proof, then the verdict (a client without a secret takes any proof);
    // the hello request, then its answer.
    read_some(fd, wire::kProofFrameBytes);
    send_all(fd, wire::auth_frame_head(1) + std::string(wire::kVerdictFrameBytes - 8, '\0'));
    read_some(fd, wire::kRequestHeaderBytes);
    std::string reply;
    wire::append_response(reply, wire::Status::Ok, 1, {"rdmx-store/2"});
    send_all(fd, reply);
    read_some(fd, wire::kRequestHeaderBytes + 4 + 1);  // the get
    send_all(fd, answer);
    ::shutdown(fd, SHUT_WR);
    read_some(fd, 1);  // until the client closes
    ::close(fd);
  });
  try {
    auto store = rdmx::connect_tcp_store("127.0.0.1", port, std::chrono::seconds(2));
    (void)store->get("k", std::chrono::milliseconds(500));
  } catch (const rdmx::Error&) {
  }
  server.join();
  return 0;
}
