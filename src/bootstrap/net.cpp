// SPDX-License-Identifier: MIT
#include "bootstrap/net.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "bootstrap/store_common.hpp"

namespace rdmx::bootstrap {

std::vector<SocketAddress> resolve_tcp(const std::string& host, std::uint16_t port, bool passive, std::string& error) {
  std::string bare = strip_brackets(host);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_protocol = IPPROTO_TCP;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* results = nullptr;
  std::string service = std::to_string(port);
  int rc = ::getaddrinfo(bare.empty() ? nullptr : bare.c_str(), service.c_str(), &hints, &results);
  std::vector<SocketAddress> out;
  if (rc != 0) {
    error = "cannot resolve '" + bare + "': " + ::gai_strerror(rc);
    return out;
  }
  for (addrinfo* ai = results; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_addrlen > sizeof(sockaddr_storage)) continue;
    SocketAddress address;
    std::memcpy(&address.storage, ai->ai_addr, ai->ai_addrlen);
    address.length = ai->ai_addrlen;
    address.family = ai->ai_family;
    out.push_back(address);
  }
  ::freeaddrinfo(results);
  if (out.empty()) error = "'" + bare + "' has no TCP address";
  return out;
}

std::string to_string(const sockaddr* address, socklen_t length) {
  char host[NI_MAXHOST] = {};
  char service[NI_MAXSERV] = {};
  if (::getnameinfo(address, length, host, sizeof(host), service, sizeof(service), NI_NUMERICHOST | NI_NUMERICSERV) !=
      0) {
    return "?";
  }
  std::string text = host;
  if (text.find(':') != std::string::npos) return "[" + text + "]:" + service;
  return text + ":" + service;
}

std::string local_address_of(int fd) {
  sockaddr_storage storage{};
  socklen_t length = sizeof(storage);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&storage), &length) != 0) return "?";
  return to_string(reinterpret_cast<sockaddr*>(&storage), length);
}

std::string peer_address_of(int fd) {
  sockaddr_storage storage{};
  socklen_t length = sizeof(storage);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&storage), &length) != 0) return "?";
  return to_string(reinterpret_cast<sockaddr*>(&storage), length);
}

bool is_loopback(const sockaddr* address) {
  if (address->sa_family == AF_INET) {
    auto* v4 = reinterpret_cast<const sockaddr_in*>(address);
    return (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
  }
  if (address->sa_family == AF_INET6) {
    auto* v6 = reinterpret_cast<const sockaddr_in6*>(address);
    if (IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr)) return v6->sin6_addr.s6_addr[12] == 127;
  }
  return false;
}

namespace {

bool same_ip(const sockaddr* a, const sockaddr* b) {
  if (a->sa_family == AF_INET && b->sa_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(b)->sin_addr.s_addr;
  }
  if (a->sa_family == AF_INET6 && b->sa_family == AF_INET6) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(b)->sin6_addr, sizeof(in6_addr)) == 0;
  }
  return false;
}

bool is_wildcard(const sockaddr* address) {
  if (address->sa_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(address)->sin_addr.s_addr == htonl(INADDR_ANY);
  }
  if (address->sa_family == AF_INET6) {
    return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr);
  }
  return false;
}

}  // namespace

bool is_local_host(const std::string& host) {
  std::string error;
  auto addresses = resolve_tcp(host, 0, false, error);
  if (addresses.empty()) return false;
  ifaddrs* interfaces = nullptr;
  if (::getifaddrs(&interfaces) != 0) interfaces = nullptr;
  bool local = false;
  for (const auto& address : addresses) {
    if (is_loopback(address.get()) || is_wildcard(address.get())) {
      local = true;
      break;
    }
    for (ifaddrs* it = interfaces; it != nullptr && !local; it = it->ifa_next) {
      if (it->ifa_addr != nullptr && same_ip(it->ifa_addr, address.get())) local = true;
    }
    if (local) break;
  }
  if (interfaces != nullptr) ::freeifaddrs(interfaces);
  return local;
}

namespace {
using Clock = core::Clock;
using std::chrono::milliseconds;
// Slices of a blocking poll(), so abort_waits() is noticed.
constexpr milliseconds kPollSlice{100};
}  // namespace

int poll_once(int fd, short events, Clock::time_point deadline) {
  auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  auto slice = std::min<Clock::duration>(left, kPollSlice);
  auto ms = std::chrono::duration_cast<milliseconds>(slice + std::chrono::microseconds(999)).count();
  pollfd pfd{.fd = fd, .events = events, .revents = 0};
  int ready = ::poll(&pfd, 1, static_cast<int>(ms));
  if (ready < 0 && errno == EINTR) return -2;  // retry
  return ready;
}

IoResult send_all(int fd, const char* data, std::size_t size, Clock::time_point deadline) {
  while (size > 0) {
    ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data += n;
      size -= static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (core::waits_aborted()) return {IoFailure::Aborted};
      int ready = poll_once(fd, POLLOUT, deadline);
      if (ready == 0 && Clock::now() >= deadline) return {IoFailure::Timeout};
      continue;
    }
    return {IoFailure::Closed, n < 0 ? errno : 0};
  }
  return {};
}

IoResult recv_all(int fd, char* data, std::size_t size, Clock::time_point deadline, bool& started) {
  while (size > 0) {
    ssize_t n = ::recv(fd, data, size, MSG_DONTWAIT);
    if (n > 0) {
      started = true;
      data += n;
      size -= static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) return {IoFailure::Closed, 0};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (core::waits_aborted()) return {IoFailure::Aborted};
      int ready = poll_once(fd, POLLIN, deadline);
      if (ready == 0 && Clock::now() >= deadline) return {IoFailure::Timeout};
      continue;
    }
    return {IoFailure::Closed, errno};
  }
  return {};
}

}  // namespace rdmx::bootstrap
