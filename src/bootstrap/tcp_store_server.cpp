// SPDX-License-Identifier: MIT
// The TCP store server: one background thread, epoll over non-blocking sockets.
//
// get/wait on a missing key park the request on the server; the answer is
// sent when the key appears (or a Timeout status when its deadline passes),
// so clients never poll. Bytes from clients are untrusted: every field is
// checked as it arrives, and a client that sends something malformed is
// logged and disconnected; the server itself keeps serving the others.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "bootstrap/tcp_store_server_state.hpp"
#include "services/config.hpp"
#include "services/log.hpp"

namespace rdmx {

namespace bootstrap {
namespace {

[[noreturn]] void throw_listen_error(const std::string& address, const std::string& what, int err) {
  throw Error(ErrorCode::System, "store server cannot listen on " + address + ": " + what + ": " + std::strerror(err),
              ErrorContext{.op = "TcpStoreServer",
                           .peer_addr = address,
                           .hint = err == EADDRINUSE
                                       ? "another process (another job's store, or torch.distributed's TCPStore on "
                                         "MASTER_PORT) uses this port; pick a free one, e.g. RDMX_STORE=host:otherport"
                                       : "check that the host is an address of this machine"});
}

UniqueFd listen_on(const SocketAddress& address, const std::string& text, int& last_error, std::string& last_what) {
  UniqueFd fd(::socket(address.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) {
    last_error = errno;
    last_what = "socket";
    return fd;
  }
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (address.family == AF_INET6) {
    // A wildcard IPv6 listener also accepts IPv4 clients.
    int zero = 0;
    ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  }
  if (::bind(fd.get(), address.get(), address.length) != 0) {
    last_error = errno;
    last_what = "bind " + text;
    return UniqueFd();
  }
  if (::listen(fd.get(), SOMAXCONN) != 0) {
    last_error = errno;
    last_what = "listen " + text;
    return UniqueFd();
  }
  return fd;
}

}  // namespace
}  // namespace bootstrap

TcpStoreServer::TcpStoreServer(const std::string& host, std::uint16_t port) : impl_(std::make_unique<Impl>()) {
  using namespace bootstrap;
  std::string requested = format_host_port(host.empty() ? "::" : host, port);
  std::vector<SocketAddress> addresses;
  std::string resolve_error;
  if (host.empty()) {
    // Prefer a dual-stack IPv6 wildcard; fall back to IPv4 where IPv6 is off.
    addresses = resolve_tcp("::", port, true, resolve_error);
    auto v4 = resolve_tcp("0.0.0.0", port, true, resolve_error);
    addresses.insert(addresses.end(), v4.begin(), v4.end());
  } else {
    addresses = resolve_tcp(host, port, true, resolve_error);
  }
  if (addresses.empty()) {
    throw Error(ErrorCode::InvalidArgument, "store server cannot listen on " + requested + ": " + resolve_error,
                ErrorContext{.op = "TcpStoreServer",
                             .peer_addr = requested,
                             .hint = "give an address of this machine, \"0.0.0.0\", \"::\" or \"\" for all"});
  }
  int last_error = 0;
  std::string last_what;
  for (const auto& address : addresses) {
    impl_->listener = listen_on(address, to_string(address.get(), address.length), last_error, last_what);
    if (impl_->listener) break;
  }
  if (!impl_->listener) throw_listen_error(requested, last_what, last_error);
  impl_->address = local_address_of(impl_->listener.get());
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  ::getsockname(impl_->listener.get(), reinterpret_cast<sockaddr*>(&bound), &length);
  impl_->port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                            : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);

  impl_->epoll.reset(::epoll_create1(EPOLL_CLOEXEC));
  impl_->wake.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!impl_->epoll || !impl_->wake) {
    throw Error(ErrorCode::System, std::string("store server cannot create epoll/eventfd: ") + std::strerror(errno),
                ErrorContext{.op = "TcpStoreServer", .peer_addr = impl_->address});
  }
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = kListenerId;
  ::epoll_ctl(impl_->epoll.get(), EPOLL_CTL_ADD, impl_->listener.get(), &event);
  event.data.u64 = kWakeId;
  ::epoll_ctl(impl_->epoll.get(), EPOLL_CTL_ADD, impl_->wake.get(), &event);

  core::auth::warn_if_unauthenticated("store server");
  impl_->key_required = core::auth::key_configured();
  RDMX_INFO("store server listening on %s (%s)", impl_->address.c_str(),
            impl_->key_required ? "clients prove the job secret" : "clients are not authenticated");
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
}

TcpStoreServer::~TcpStoreServer() {
  impl_->stopping.store(true, std::memory_order_release);
  std::uint64_t one = 1;
  [[maybe_unused]] ssize_t ignored = ::write(impl_->wake.get(), &one, sizeof(one));
  if (impl_->thread.joinable()) impl_->thread.join();
  RDMX_INFO("store server on %s stopped (%zu clients were connected)", impl_->address.c_str(),
            impl_->connections.size());
}

std::uint16_t TcpStoreServer::port() const { return impl_->port; }

void TcpStoreServer::Impl::run() {
  epoll_event events[64];
  while (!stopping.load(std::memory_order_acquire)) {
    int count = ::epoll_wait(epoll.get(), events, 64, next_timeout_ms());
    if (count < 0) {
      if (errno == EINTR) continue;
      RDMX_WARN("store server %s: epoll_wait failed: %s; stopping", address.c_str(), std::strerror(errno));
      return;
    }
    for (int i = 0; i < count; ++i) {
      std::uint64_t id = events[i].data.u64;
      try {
        if (id == bootstrap::kListenerId) {
          accept_connections();
        } else if (id == bootstrap::kWakeId) {
          std::uint64_t value;
          [[maybe_unused]] ssize_t ignored = ::read(wake.get(), &value, sizeof(value));
        } else {
          on_event(id, events[i].events);
        }
      } catch (const std::exception& e) {
        // Never let one client's request take the server down.
        auto it = connections.find(id);
        if (it != connections.end())
          drop(it->second, std::string("internal error: ") + e.what(), true);
        else
          RDMX_WARN("store server %s: %s", address.c_str(), e.what());
      }
    }
    expire_waiters();
    expire_handshakes();
    expire_partial_requests();
    close_dead();
    resume_paused_input();
  }
}

int TcpStoreServer::Impl::next_timeout_ms() const {
  if (deadlines.empty() && handshake_deadlines.empty() && request_deadlines.empty()) return -1;
  auto next = bootstrap::Clock::time_point::max();
  if (!deadlines.empty()) next = deadlines.begin()->first;
  if (!handshake_deadlines.empty()) next = std::min(next, handshake_deadlines.front().first);
  if (!request_deadlines.empty()) next = std::min(next, request_deadlines.front().first);
  auto left = next - bootstrap::Clock::now();
  if (left <= bootstrap::Clock::duration::zero()) return 0;
  // Round up so the waiter has expired when we wake.
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(left + std::chrono::microseconds(999)).count();
  return static_cast<int>(std::min<std::int64_t>(ms, 60'000));
}

void TcpStoreServer::Impl::accept_connections() {
  using namespace bootstrap;
  for (;;) {
    int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EMFILE && raise_open_files_limit()) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: stop accepting until a client leaves, instead
        // of spinning on a listener that stays readable.
        RDMX_WARN(
            "store server %s: cannot accept more clients (%s, %zu connected); waiting for one to leave "
            "(raise the open-files limit, ulimit -n)",
            address.c_str(), std::strerror(errno), connections.size());
        epoll_event event{};
        event.data.u64 = kListenerId;
        ::epoll_ctl(epoll.get(), EPOLL_CTL_MOD, listener.get(), &event);
        accept_paused = true;
        return;
      }
      RDMX_WARN("store server %s: accept failed: %s", address.c_str(), std::strerror(errno));
      return;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::uint64_t id = next_connection_id++;
    Connection& connection = connections[id];
    connection.fd.reset(fd);
    connection.peer = peer_address_of(fd);
    connection.interest = EPOLLIN;
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u64 = id;
    if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, fd, &event) != 0) {
      RDMX_WARN("store server %s: cannot watch client %s: %s", address.c_str(), connection.peer.c_str(),
                std::strerror(errno));
      connections.erase(id);
      continue;
    }
    connection.challenge = core::auth::new_challenge();
    connection.output = wire::auth_frame_head(key_required ? 1 : 0);
    connection.output.append(reinterpret_cast<const char*>(connection.challenge.data()), connection.challenge.size());
    flush(connection);
    handshake_deadlines.emplace_back(Clock::now() + std::min<Clock::duration>(core::timeout(), kHandshakeBound), id);
    RDMX_TRACE("store server %s: client %s connected", address.c_str(), connection.peer.c_str());
  }
}

// One client per rank means one descriptor per rank: the usual soft limit
// (1024) is too low for large jobs. Raise it to the hard limit, once, when
// it is actually hit.
bool TcpStoreServer::Impl::raise_open_files_limit() {
  if (raised_open_files_limit) return false;
  raised_open_files_limit = true;
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return false;
  rlim_t old_soft = limit.rlim_cur;
  limit.rlim_cur = limit.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) return false;
  RDMX_INFO("store server %s: %zu clients reached the open-files limit; raised it from %llu to %llu", address.c_str(),
            connections.size(), static_cast<unsigned long long>(old_soft),
            static_cast<unsigned long long>(limit.rlim_cur));
  return true;
}

void TcpStoreServer::Impl::on_event(std::uint64_t id, std::uint32_t events) {
  auto it = connections.find(id);
  if (it == connections.end() || it->second.dead) return;  // closed earlier in this batch
  bootstrap::Connection& connection = it->second;
  if (events & EPOLLOUT) {
    flush(connection);
    if (connection.dead) return;
    // Output drained below the limit: resume reading what is buffered.
    process_input(id, connection);
    if (connection.dead) return;
  }
  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) read_from(id, connection, (events & (EPOLLHUP | EPOLLERR)) != 0);
  if (!connection.dead) update_interest(id, connection);
}

void TcpStoreServer::Impl::read_from(std::uint64_t id, bootstrap::Connection& connection, bool hung_up) {
  using bootstrap::kMaxBufferedInput;
  if (connection.output.size() - connection.output_sent > bootstrap::kMaxQueuedOutput) return;
  const std::size_t room = buffered_input < kMaxBufferedInput ? kMaxBufferedInput - buffered_input : 0;
  if (room == 0 && !connection.input.empty()) {
    if (hung_up) {
      drop(connection, "closed in the middle of a request", true);
      return;
    }
    // Its request waits until others finish theirs (or the bound closes it).
    connection.input_paused = true;
    input_paused.insert(id);
    return;
  }
  // Past the bound a client still gets a small budget: a whole small request goes through.
  constexpr std::size_t kSmallRequest = 16 << 10;
  char buffer[65536];
  std::size_t budget = std::min(bootstrap::kReadBudget, std::max(room, kSmallRequest));
  while (budget > 0) {
    ssize_t n = ::recv(connection.fd.get(), buffer, std::min(sizeof(buffer), budget), 0);
    if (n > 0) {
      connection.input.append(buffer, static_cast<std::size_t>(n));
      buffered_input += static_cast<std::size_t>(n);
      budget -= std::min(budget, static_cast<std::size_t>(n));
      continue;
    }
    if (n == 0) {
      // An orderly close; a partial request left behind is worth a warning.
      if (!connection.input.empty()) process_input(id, connection);
      if (connection.dead) return;
      if (!connection.input.empty()) {
        drop(connection,
             "closed in the middle of a request (" + std::to_string(connection.input.size()) + " bytes of it received)",
             true);
      } else {
        drop(connection, "closed the connection", false);
      }
      return;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    drop(connection, std::string("connection error: ") + std::strerror(errno), false);
    return;
  }
  process_input(id, connection);
}

void TcpStoreServer::Impl::process_input(std::uint64_t id, bootstrap::Connection& connection) {
  using namespace bootstrap;
  if (!connection.authenticated && !authenticate(connection)) return;
  std::size_t offset = 0;
  Request request;
  while (!connection.dead && offset < connection.input.size() &&
         connection.output.size() - connection.output_sent <= kMaxQueuedOutput) {
    std::size_t consumed = 0;
    std::string why;
    ParseResult result = parse_request(std::string_view(connection.input).substr(offset), consumed, request, why);
    if (result == ParseResult::NeedMore) break;
    if (result == ParseResult::Malformed) {
      drop(connection, "malformed request: " + why, true);
      return;
    }
    offset += consumed;
    handle(id, connection, request);
  }
  // Erase once per batch: erasing per request would move the buffer each time.
  if (offset != 0 && !connection.dead) {
    connection.input.erase(0, offset);
    buffered_input -= offset;
    connection.request_started = Clock::time_point::max();
  }
  if (connection.dead || connection.input.empty()) {
    connection.request_started = Clock::time_point::max();
  } else if (connection.request_started == Clock::time_point::max()) {
    connection.request_started = Clock::now();
    request_deadlines.emplace_back(connection.request_started + request_bound, id);
  }
}

bool TcpStoreServer::Impl::authenticate(bootstrap::Connection& connection) {
  using namespace bootstrap;
  if (connection.input.size() < wire::kProofFrameBytes) {
    // Not a proof (it would be whole by now): a stranger's bytes are not waited for.
    if (!connection.input.empty() && connection.input.size() >= 8 &&
        !wire::is_auth_frame_head(connection.input.data())) {
      core::auth::log_refusal("store server " + address, connection.peer,
                              "its first bytes are not a proof of the job secret (an older rdmx, or not rdmx)");
      drop(connection, "refused", false);
    }
    return false;
  }
  const bool well_formed = wire::is_auth_frame_head(connection.input.data());
  core::auth::Proof proof;
  std::memcpy(proof.data(), connection.input.data() + 8, proof.size());
  const bool verified = well_formed && core::auth::verify(wire::kAuthPurpose, connection.challenge, {}, proof);
  connection.output += wire::auth_frame_head(verified ? 1 : 0);
  core::auth::Proof answer{};
  if (verified) {
    // The client believes nothing this server says until it proves the secret in turn.
    core::auth::Challenge theirs;
    std::memcpy(theirs.data(), connection.input.data() + 8 + proof.size(), theirs.size());
    answer = core::auth::prove(wire::kServerAuthPurpose, theirs, connection.challenge);
  }
  connection.output.append(reinterpret_cast<const char*>(answer.data()), answer.size());
  flush(connection);
  if (!verified) {
    core::auth::log_refusal("store server " + address, connection.peer,
                            well_formed
                                ? "its proof of the job secret did not verify (RDMX_AUTH_KEY differs, or the "
                                  "client has none)"
                                : "its first bytes are not a proof of the job secret (an older rdmx, or not rdmx)");
    drop(connection, "refused", false);
    return false;
  }
  connection.authenticated = true;
  connection.input.erase(0, wire::kProofFrameBytes);
  return true;
}

void TcpStoreServer::Impl::expire_handshakes() {
  const auto now = bootstrap::Clock::now();
  while (!handshake_deadlines.empty() && handshake_deadlines.front().first <= now) {
    auto it = connections.find(handshake_deadlines.front().second);
    handshake_deadlines.pop_front();
    if (it == connections.end() || it->second.authenticated || it->second.dead) continue;
    core::auth::log_refusal("store server " + address, it->second.peer,
                            "it did not prove the job secret within min(RDMX_TIMEOUT, 10 s) of connecting");
    drop(it->second, "handshake timed out", false);
  }
}

void TcpStoreServer::Impl::expire_partial_requests() {
  const auto now = bootstrap::Clock::now();
  while (!request_deadlines.empty() && request_deadlines.front().first <= now) {
    auto it = connections.find(request_deadlines.front().second);
    request_deadlines.pop_front();
    // A request started later has its own, later entry.
    if (it == connections.end() || it->second.dead || it->second.request_started + request_bound > now) continue;
    drop(it->second,
         "a request stayed incomplete for RDMX_TIMEOUT (" + std::to_string(request_bound.count()) + " ms; " +
             std::to_string(it->second.input.size()) + " bytes of it received)",
         true);
  }
}

void TcpStoreServer::Impl::resume_paused_input() {
  if (input_paused.empty() || buffered_input >= bootstrap::kMaxBufferedInput) return;
  for (std::uint64_t id : input_paused) {
    auto it = connections.find(id);
    if (it == connections.end() || it->second.dead) continue;
    it->second.input_paused = false;
    update_interest(id, it->second);
  }
  input_paused.clear();
}

void TcpStoreServer::Impl::reply(std::uint64_t id, std::uint64_t request_id, bootstrap::wire::Status status,
                                 const std::vector<std::string_view>& args) {
  auto it = connections.find(id);
  if (it == connections.end() || it->second.dead) return;
  bootstrap::Connection& connection = it->second;
  bootstrap::wire::append_response(connection.output, status, request_id, args);
  flush(connection);
  if (!connection.dead) update_interest(id, connection);
}

void TcpStoreServer::Impl::flush(bootstrap::Connection& connection) {
  while (connection.output_sent < connection.output.size()) {
    ssize_t n = ::send(connection.fd.get(), connection.output.data() + connection.output_sent,
                       connection.output.size() - connection.output_sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      connection.output_sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    drop(connection, std::string("cannot send to client: ") + std::strerror(errno), false);
    return;
  }
  if (connection.output_sent == connection.output.size()) {
    connection.output.clear();
    connection.output_sent = 0;
  } else if (connection.output_sent > (std::size_t{1} << 20)) {
    connection.output.erase(0, connection.output_sent);
    connection.output_sent = 0;
  }
}

void TcpStoreServer::Impl::update_interest(std::uint64_t id, bootstrap::Connection& connection) {
  std::size_t queued = connection.output.size() - connection.output_sent;
  std::uint32_t wanted = 0;
  if (queued <= bootstrap::kMaxQueuedOutput && !connection.input_paused) wanted |= EPOLLIN;
  if (queued > 0) wanted |= EPOLLOUT;
  if (wanted == connection.interest) return;
  epoll_event event{};
  event.events = wanted;
  event.data.u64 = id;
  ::epoll_ctl(epoll.get(), EPOLL_CTL_MOD, connection.fd.get(), &event);
  connection.interest = wanted;
}

void TcpStoreServer::Impl::drop(bootstrap::Connection& connection, const std::string& why, bool warn) {
  if (connection.dead) return;
  connection.dead = true;
  if (warn) {
    RDMX_WARN("store server %s: closing client %s: %s", address.c_str(), connection.peer.c_str(), why.c_str());
  } else {
    RDMX_TRACE("store server %s: client %s left: %s", address.c_str(), connection.peer.c_str(), why.c_str());
  }
}

void TcpStoreServer::Impl::close_dead() {
  for (auto it = connections.begin(); it != connections.end();) {
    if (!it->second.dead) {
      ++it;
      continue;
    }
    std::vector<std::uint64_t> parked(it->second.waiters.begin(), it->second.waiters.end());
    for (std::uint64_t waiter_id : parked) remove_waiter(waiter_id);
    buffered_input -= it->second.input.size();
    input_paused.erase(it->first);
    ::epoll_ctl(epoll.get(), EPOLL_CTL_DEL, it->second.fd.get(), nullptr);
    it = connections.erase(it);
    if (accept_paused) {
      epoll_event event{};
      event.events = EPOLLIN;
      event.data.u64 = bootstrap::kListenerId;
      ::epoll_ctl(epoll.get(), EPOLL_CTL_MOD, listener.get(), &event);
      accept_paused = false;
    }
  }
}

}  // namespace rdmx
