// SPDX-License-Identifier: MIT
#include "doctor/doctor_probe.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

namespace rdmx::cli::doctor {
namespace {

constexpr char kMagic[8] = {'R', 'D', 'M', 'X', 'D', 'O', 'C', '1'};
constexpr std::size_t kAnswer = 16;  // magic, then the clock in nanoseconds since the epoch
constexpr std::size_t kBatch = 256;  // probes in flight at once

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A numeric address and port as a socket address; false when not numeric.
bool to_socket_address(const std::string& host, int port, sockaddr_storage& out, socklen_t& length) {
  out = {};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<std::uint16_t>(port));
    length = sizeof(sockaddr_in);
    return true;
  }
  if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<std::uint16_t>(port));
    length = sizeof(sockaddr_in6);
    return true;
  }
  return false;
}

std::string error_text(int error) { return std::strerror(error); }

}  // namespace

Listeners::Listeners(const std::vector<LocalAddress>& addresses, std::uint16_t first, std::uint16_t last) {
  for (const LocalAddress& a : addresses) {
    sockaddr_storage at{};
    socklen_t length = 0;
    int fd = -1;
    std::string error;
    if (!to_socket_address(a.address, 0, at, length)) {
      error = "not a numeric address";
    } else if ((fd = ::socket(at.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0) {
      error = "socket: " + error_text(errno);
    } else {
      int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      const unsigned count = first == 0 ? 1 : static_cast<unsigned>(last - first) + 1;
      std::uint32_t start = 0;
      if (::getrandom(&start, sizeof(start), 0) != sizeof(start)) start = static_cast<std::uint32_t>(::getpid());
      int bind_error = EADDRINUSE;
      for (unsigned i = 0; i < count; ++i) {
        const int port = first == 0 ? 0 : first + static_cast<int>((start + i) % count);
        to_socket_address(a.address, port, at, length);
        if (::bind(fd, reinterpret_cast<const sockaddr*>(&at), length) == 0) {
          bind_error = 0;
          break;
        }
        bind_error = errno;
        if (bind_error != EADDRINUSE && bind_error != EACCES) break;
      }
      if (bind_error != 0) {
        error = "bind: " + error_text(bind_error);
      } else if (::listen(fd, 64) != 0) {
        error = "listen: " + error_text(errno);
      }
    }
    int port = 0;
    if (error.empty()) {
      socklen_t size = sizeof(at);
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&at), &size);
      port = ntohs(at.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&at)->sin_port
                                           : reinterpret_cast<sockaddr_in6*>(&at)->sin6_port);
    } else if (fd >= 0) {
      ::close(fd);
      fd = -1;
    }
    fds_.push_back(fd);
    ports_.push_back(port);
    errors_.push_back(error);
  }
  thread_ = std::thread([this] { serve(); });
}

Listeners::~Listeners() {
  stop_ = true;
  thread_.join();
  for (int fd : fds_) {
    if (fd >= 0) ::close(fd);
  }
}

void Listeners::serve() {
  std::vector<pollfd> polled;
  for (int fd : fds_) {
    if (fd >= 0) polled.push_back({fd, POLLIN, 0});
  }
  // A short poll so that the destructor's stop is seen promptly.
  while (!stop_) {
    if (::poll(polled.data(), polled.size(), 50) <= 0) continue;
    for (const pollfd& p : polled) {
      if ((p.revents & POLLIN) == 0) continue;
      const int fd = ::accept4(p.fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      char answer[kAnswer];
      std::memcpy(answer, kMagic, sizeof(kMagic));
      const std::int64_t stamp = now_ns();
      std::memcpy(answer + sizeof(kMagic), &stamp, sizeof(stamp));
      // 16 bytes fit any fresh socket's send buffer: the write does not block.
      [[maybe_unused]] const ssize_t sent = ::send(fd, answer, sizeof(answer), MSG_NOSIGNAL | MSG_DONTWAIT);
      ::close(fd);
    }
  }
}

std::vector<ProbeResult> probe_all(const std::vector<ProbeTarget>& targets, double seconds) {
  std::vector<ProbeResult> results(targets.size());
  for (std::size_t begin = 0; begin < targets.size(); begin += kBatch) {
    const std::size_t end = std::min(targets.size(), begin + kBatch);
    struct InFlight {
      std::size_t index;
      int fd = -1;
      bool connected = false;
      std::int64_t started_ns = 0;  // before connect(): the listener's stamp comes later
      char answer[kAnswer];
      std::size_t got = 0;
    };
    std::vector<InFlight> flying;
    for (std::size_t i = begin; i < end; ++i) {
      const ProbeTarget& t = targets[i];
      ProbeResult& r = results[i];
      sockaddr_storage from{}, to{};
      socklen_t from_length = 0, to_length = 0;
      if (!to_socket_address(t.from_address, 0, from, from_length) ||
          !to_socket_address(t.to_address, t.port, to, to_length) || from.ss_family != to.ss_family) {
        r = {"error", "addresses of different families or not numeric", 0, 0};
        continue;
      }
      const int fd = ::socket(to.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) {
        r = {"error", "socket: " + error_text(errno), 0, 0};
        continue;
      }
      if (::bind(fd, reinterpret_cast<const sockaddr*>(&from), from_length) != 0) {
        r = {"error", "bind to " + t.from_address + ": " + error_text(errno), 0, 0};
        ::close(fd);
        continue;
      }
      const std::int64_t started_ns = now_ns();
      if (::connect(fd, reinterpret_cast<const sockaddr*>(&to), to_length) != 0 && errno != EINPROGRESS) {
        const int e = errno;
        r = {e == ECONNREFUSED                         ? "refused"
             : (e == ENETUNREACH || e == EHOSTUNREACH) ? "unreachable"
                                                       : "error",
             error_text(e), 0, 0};
        ::close(fd);
        continue;
      }
      flying.push_back({.index = i, .fd = fd, .started_ns = started_ns});
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    std::size_t open = flying.size();
    while (open > 0) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      std::vector<pollfd> polled;
      std::vector<InFlight*> owners;
      for (InFlight& f : flying) {
        if (f.fd < 0) continue;
        polled.push_back({f.fd, static_cast<short>(f.connected ? POLLIN : POLLOUT), 0});
        owners.push_back(&f);
      }
      if (::poll(polled.data(), polled.size(), static_cast<int>(std::min<long long>(left.count(), 100))) <= 0) continue;
      for (std::size_t k = 0; k < polled.size(); ++k) {
        if (polled[k].revents == 0) continue;
        InFlight& f = *owners[k];
        ProbeResult& r = results[f.index];
        auto finish = [&](std::string result, std::string detail) {
          r.result = std::move(result);
          r.detail = std::move(detail);
          ::close(f.fd);
          f.fd = -1;
          --open;
        };
        if (!f.connected) {
          int error = 0;
          socklen_t size = sizeof(error);
          ::getsockopt(f.fd, SOL_SOCKET, SO_ERROR, &error, &size);
          if (error != 0) {
            finish(error == ECONNREFUSED                             ? "refused"
                   : (error == ENETUNREACH || error == EHOSTUNREACH) ? "unreachable"
                                                                     : "error",
                   error_text(error));
            continue;
          }
          f.connected = true;
          continue;
        }
        const ssize_t n = ::recv(f.fd, f.answer + f.got, kAnswer - f.got, 0);
        if (n > 0) f.got += static_cast<std::size_t>(n);
        if (n > 0 && f.got < kAnswer) continue;
        if (f.got < kAnswer || std::memcmp(f.answer, kMagic, sizeof(kMagic)) != 0) {
          finish("wrong answer", "something else listens on port " + std::to_string(targets[f.index].port));
          continue;
        }
        const std::int64_t done_ns = now_ns();
        std::int64_t stamp = 0;
        std::memcpy(&stamp, f.answer + sizeof(kMagic), sizeof(stamp));
        // The stamp was taken between the two readings of this clock: the
        // offset is known to within half the time between them.
        r.rtt_ms = static_cast<double>(done_ns - f.started_ns) / 1e6;
        r.offset_ms =
            (static_cast<double>(stamp) - (static_cast<double>(f.started_ns) + static_cast<double>(done_ns)) / 2) / 1e6;
        finish("ok", "");
      }
    }
    for (InFlight& f : flying) {
      if (f.fd < 0) continue;
      char bound[32];
      std::snprintf(bound, sizeof(bound), "%.1f s", seconds);
      results[f.index] = {
          "timeout", (f.connected ? "connected, no answer within " : "no answer within ") + std::string(bound), 0, 0};
      ::close(f.fd);
    }
  }
  return results;
}

}  // namespace rdmx::cli::doctor
