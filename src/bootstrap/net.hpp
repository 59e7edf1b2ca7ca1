// SPDX-License-Identifier: MIT
// Small socket helpers for the TCP store, the control mesh and launcher
// detection.
#pragma once

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "services/wait.hpp"

namespace rdmx::bootstrap {

// Owns a file descriptor.
class UniqueFd {
 public:
  explicit UniqueFd(int fd = -1) noexcept : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  int release() noexcept { return std::exchange(fd_, -1); }
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

// One resolved socket address.
struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
  int family = AF_UNSPEC;
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

// getaddrinfo() for a TCP host:port. `host` may be a name or an IPv4/IPv6
// literal (brackets allowed). Passive with an empty host gives the wildcard.
// On failure returns an empty list and sets `error`.
std::vector<SocketAddress> resolve_tcp(const std::string& host, std::uint16_t port, bool passive, std::string& error);

// "10.0.0.1:29500" or "[fd00::1]:29500".
std::string to_string(const sockaddr* address, socklen_t length);
// The address a socket is bound to or connected to, as above.
std::string local_address_of(int fd);
std::string peer_address_of(int fd);

// True when `host` resolves to an address of this machine: loopback, or an
// address of a local interface (getifaddrs), or the wildcard.
bool is_local_host(const std::string& host);
// True for 127.0.0.0/8 and ::1 (and IPv4-mapped loopback).
bool is_loopback(const sockaddr* address);

// Blocking I/O on a non-blocking socket, bounded by a deadline: every wait
// is a poll() of at most 100 ms, so abort_waits() is noticed.
// What went wrong on the socket, for the caller to turn into an Error.
enum class IoFailure { None, Timeout, Closed, Aborted };

struct IoResult {
  IoFailure failure = IoFailure::None;
  int error = 0;  // errno for Closed, when there was one
};

// One poll() for `events`, a slice of what is left until `deadline`: the
// count poll() returns (0 once the deadline passed; -2 when interrupted).
int poll_once(int fd, short events, core::Clock::time_point deadline);
IoResult send_all(int fd, const char* data, std::size_t size, core::Clock::time_point deadline);
// Reads exactly `size` bytes, or fails. `started` tells whether any byte
// was read, since then the stream cannot be resumed after a failure.
IoResult recv_all(int fd, char* data, std::size_t size, core::Clock::time_point deadline, bool& started);

}  // namespace rdmx::bootstrap
