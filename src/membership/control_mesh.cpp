// SPDX-License-Identifier: MIT
#include "membership/control_mesh.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>

#include <cerrno>
#include <cstring>

#include "bootstrap/store_gather.hpp"
#include "rdmx/error.hpp"
#include "services/auth.hpp"
#include "services/log.hpp"
#include "services/port_range.hpp"
#include "services/socket_iface.hpp"

namespace rdmx::membership {
namespace {

constexpr std::uint32_t kFrameMagic = 0x43584452;  // "RDXC"
constexpr std::uint32_t kHelloMagic = 0x48584452;  // "RDXH"
constexpr std::uint8_t kHelloVersion = 1;
constexpr std::size_t kHelloBytes = 24;
constexpr const char* kPurpose = "rdmx control mesh";
constexpr std::uint8_t kAccepted = 0xA5;

void put32(std::uint8_t* at, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) at[i] = static_cast<std::uint8_t>(value >> (8 * i));
}
void put64(std::uint8_t* at, std::uint64_t value) {
  for (int i = 0; i < 8; ++i) at[i] = static_cast<std::uint8_t>(value >> (8 * i));
}
std::uint32_t get32(const std::uint8_t* at) {
  std::uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value |= std::uint32_t{at[i]} << (8 * i);
  return value;
}
std::uint64_t get64(const std::uint8_t* at) {
  std::uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value |= std::uint64_t{at[i]} << (8 * i);
  return value;
}

std::uint64_t digest_of(const std::string& text) {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

// "" when `result` is success, otherwise what went wrong, for messages.
std::string problem_of(const bootstrap::IoResult& result) {
  switch (result.failure) {
    case bootstrap::IoFailure::None: return "";
    case bootstrap::IoFailure::Timeout: return "timed out";
    case bootstrap::IoFailure::Aborted: return "waits were aborted";
    case bootstrap::IoFailure::Closed: break;
  }
  return result.error != 0 ? std::string("the connection failed: ") + std::strerror(result.error)
                           : "the connection closed";
}

std::string send_bytes(int fd, const std::uint8_t* data, std::size_t length, core::Clock::time_point deadline) {
  return problem_of(bootstrap::send_all(fd, reinterpret_cast<const char*>(data), length, deadline));
}

void tune(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

std::string port_text(const sockaddr_storage& address) {
  const auto* in4 = reinterpret_cast<const sockaddr_in*>(&address);
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&address);
  return std::to_string(ntohs(address.ss_family == AF_INET6 ? in6->sin6_port : in4->sin_port));
}

}  // namespace

ControlMesh::ControlMesh(Store& store, const std::string& tag, int rank, int size, core::Clock::time_point deadline)
    : rank_(rank), size_(size), tag_digest_(digest_of(tag)) {
  peers_.resize(static_cast<std::size_t>(size));
  core::auth::warn_if_unauthenticated("the control mesh");
  const core::SocketInterface iface = core::choose_interface();
  sockaddr_storage bound = iface.address;
  const core::PortRange ports = core::port_range();
  listener_.reset(::socket(bound.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  socklen_t length = iface.address_len;
  int bind_error = 0;
  if (listener_ && (bind_error = core::bind_in_port_range(listener_.get(), bound, length, ports)) != 0)
    errno = bind_error;
  if (!listener_ || bind_error != 0 || ::listen(listener_.get(), std::max(16, size)) != 0 ||
      ::getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
    throw Error(ErrorCode::Config,
                std::string("control mesh: cannot listen on ") + iface.name + " (" +
                    core::format_address(reinterpret_cast<const sockaddr*>(&iface.address)) + ", ports " +
                    ports.text() + "): " + std::strerror(errno),
                ErrorContext{.op = "control mesh listen",
                             .rank = rank,
                             .hint = "check RDMX_SOCKET_IFNAME, and that RDMX_PORT_RANGE has free ports"});
  }
  const std::string host = bootstrap::to_string(reinterpret_cast<const sockaddr*>(&bound), length);
  const std::string ip = host.substr(0, host.rfind(':'));
  const std::vector<std::string> published = bootstrap::gather_through_store(
      store, tag + "/ctl", rank, size, ip + "\n" + port_text(bound), "control address", "control mesh", deadline);
  handshake_all(published, deadline);
  listener_.reset();
}

namespace {

// A connection this rank opened to a lower rank: it awaits the challenge,
// then (hello sent) the one-byte answer.
struct Dialing {
  int peer = -1;
  std::string where;
  bootstrap::UniqueFd fd;
  bool challenged = false;
  std::vector<std::uint8_t> got;
};

// A connection a higher rank opened: it awaits the hello and proof.
struct Answering {
  bootstrap::UniqueFd fd;
  std::string source;
  core::auth::Challenge challenge{};
  core::Clock::time_point until;
  std::vector<std::uint8_t> got;
};

// Reads what has arrived, up to `want` bytes in all: "" while the connection
// is fine, else what went wrong.
std::string read_some(int fd, std::vector<std::uint8_t>& got, std::size_t want) {
  while (got.size() < want) {
    std::uint8_t buffer[128];
    const ssize_t n = ::recv(fd, buffer, std::min(sizeof(buffer), want - got.size()), MSG_DONTWAIT);
    if (n > 0) {
      got.insert(got.end(), buffer, buffer + n);
    } else if (n == 0) {
      return "the connection closed";
    } else if (errno != EINTR) {
      return errno == EAGAIN || errno == EWOULDBLOCK ? ""
                                                     : std::string("the connection failed: ") + std::strerror(errno);
    }
  }
  return "";
}

ErrorContext dial_context(int rank, int peer, const std::string& op, const std::string& where) {
  return ErrorContext{.op = op,
                      .rank = rank,
                      .peer_rank = peer,
                      .peer_addr = where,
                      .hint =
                          "the peer may have died, be unreachable from this host (RDMX_SOCKET_IFNAME), or have "
                          "its port refused by a firewall (RDMX_PORT_RANGE); rdmx doctor checks each"};
}

}  // namespace

// Every connection of this rank at once, dialled and answered in one poll
// loop: a rank that handshook one peer after the other made each wait for
// all the lower ones, and the ranks' set-up times added up.
void ControlMesh::handshake_all(const std::vector<std::string>& published, core::Clock::time_point deadline) {
  std::vector<Dialing> dialing;
  for (int peer = 0; peer < rank_; ++peer) {
    const std::string& text = published[static_cast<std::size_t>(peer)];
    const std::size_t cut = text.find('\n');
    std::string host = cut == std::string::npos ? text : text.substr(0, cut);
    if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    const int port = cut == std::string::npos ? 0 : std::atoi(text.c_str() + cut + 1);
    std::string error;
    const auto addresses = bootstrap::resolve_tcp(host, static_cast<std::uint16_t>(port), false, error);
    Dialing d;
    d.peer = peer;
    d.where = host + ":" + std::to_string(port);
    if (addresses.empty()) {
      throw Error(
          ErrorCode::Config,
          "control mesh: rank " + std::to_string(peer) + " published " + d.where + ", which does not resolve: " + error,
          dial_context(rank_, peer, "control mesh connect", d.where));
    }
    d.fd.reset(::socket(addresses[0].family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    tune(d.fd.get());
    if (::connect(d.fd.get(), addresses[0].get(), addresses[0].length) != 0 && errno != EINPROGRESS) {
      throw Error(ErrorCode::PeerFailure,
                  "control mesh: cannot connect to rank " + std::to_string(peer) + ": " + std::strerror(errno),
                  dial_context(rank_, peer, "control mesh connect", d.where));
    }
    dialing.push_back(std::move(d));
  }
  const auto refused = [&](const Dialing& d, const std::string& problem) {
    return Error(problem.find("timed out") != std::string::npos ? ErrorCode::Timeout : ErrorCode::PeerFailure,
                 "control mesh: rank " + std::to_string(d.peer) + " at " + d.where +
                     " did not take this rank's connection (" + problem + ")",
                 dial_context(rank_, d.peer, "control mesh handshake", d.where));
  };

  std::vector<Answering> answering;
  int missing = size_ - 1 - rank_;
  std::vector<pollfd> fds;
  while (!dialing.empty() || missing > 0) {
    const auto now = core::Clock::now();
    if (now >= deadline || core::waits_aborted()) {
      if (!dialing.empty()) throw refused(dialing.front(), core::waits_aborted() ? "waits were aborted" : "timed out");
      std::string ranks;
      for (int peer = rank_ + 1; peer < size_; ++peer) {
        if (!peers_[static_cast<std::size_t>(peer)]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(peer);
      }
      throw Error(
          ErrorCode::Timeout, "control mesh: ranks " + ranks + " never connected to rank " + std::to_string(rank_),
          ErrorContext{.op = "control mesh accept",
                       .rank = rank_,
                       .hint = "those ranks did not create the communicator in time, or cannot reach this host"});
    }
    // A connection that cannot finish its handshake soon is dropped, not
    // waited for: it must not hold up the ranks that do.
    std::erase_if(answering, [&](const Answering& a) {
      if (now < a.until) return false;
      core::auth::log_refusal("control mesh of rank " + std::to_string(rank_), a.source, "timed out");
      return true;
    });
    auto until = std::min(deadline, now + std::chrono::milliseconds(100));
    fds.clear();
    if (missing > 0) fds.push_back({listener_.get(), POLLIN, 0});
    for (const Dialing& d : dialing) fds.push_back({d.fd.get(), POLLIN, 0});
    for (const Answering& a : answering) {
      fds.push_back({a.fd.get(), POLLIN, 0});
      until = std::min(until, a.until);
    }
    const auto wait_ms = std::chrono::ceil<std::chrono::milliseconds>(until - now).count();
    if (::poll(fds.data(), fds.size(), static_cast<int>(std::max<long long>(wait_ms, 1))) <= 0) continue;

    std::size_t at = missing > 0 ? 1 : 0;
    for (Dialing& d : dialing) {
      if (fds[at++].revents == 0) continue;
      const std::size_t want = d.challenged ? 1 : core::auth::kChallengeBytes;
      std::string problem = read_some(d.fd.get(), d.got, want);
      if (!problem.empty()) throw refused(d, problem);
      if (d.got.size() < want) continue;
      if (d.challenged) {
        if (d.got[0] != kAccepted) throw refused(d, "it refused this rank");
        peers_[static_cast<std::size_t>(d.peer)] = std::move(d.fd);
        continue;
      }
      std::uint8_t hello[kHelloBytes + core::auth::kProofBytes] = {};
      put32(hello, kHelloMagic);
      hello[4] = kHelloVersion;
      put32(hello + 8, static_cast<std::uint32_t>(rank_));
      put32(hello + 12, static_cast<std::uint32_t>(d.peer));
      put64(hello + 16, tag_digest_);
      core::auth::Challenge theirs;
      std::memcpy(theirs.data(), d.got.data(), theirs.size());
      const auto proof = core::auth::prove(kPurpose, theirs, std::span<const std::uint8_t>(hello, kHelloBytes));
      std::memcpy(hello + kHelloBytes, proof.data(), proof.size());
      problem = send_bytes(d.fd.get(), hello, sizeof(hello), deadline);
      if (!problem.empty()) throw refused(d, problem);
      d.challenged = true;
      d.got.clear();
    }
    std::erase_if(dialing, [](const Dialing& d) { return !d.fd; });

    for (Answering& a : answering) {
      if (fds[at++].revents == 0) continue;
      const std::size_t want = kHelloBytes + core::auth::kProofBytes;
      std::string problem = read_some(a.fd.get(), a.got, want);
      if (problem.empty() && a.got.size() < want) continue;
      const std::uint8_t* hello = a.got.data();
      int from = -1;
      if (problem.empty()) {
        from = static_cast<int>(get32(hello + 8));
        core::auth::Proof proof;
        std::memcpy(proof.data(), hello + kHelloBytes, proof.size());
        if (get32(hello) != kHelloMagic || hello[4] != kHelloVersion) {
          problem = "not an rdmx control-mesh hello";
        } else if (!core::auth::verify(kPurpose, a.challenge, std::span<const std::uint8_t>(hello, kHelloBytes),
                                       proof)) {
          problem = "wrong proof of the job secret (RDMX_AUTH_KEY)";
        } else if (get64(hello + 16) != tag_digest_ || static_cast<int>(get32(hello + 12)) != rank_) {
          problem = "a hello for another communicator or rank";
        } else if (from <= rank_ || from >= size_ || peers_[static_cast<std::size_t>(from)]) {
          problem = "rank " + std::to_string(from) + " is not one this rank waits for";
        }
      }
      if (!problem.empty()) {
        core::auth::log_refusal("control mesh of rank " + std::to_string(rank_), a.source, problem);
        a.fd.reset();
        continue;
      }
      const std::uint8_t accepted = kAccepted;
      if (send_bytes(a.fd.get(), &accepted, 1, a.until).empty()) {
        peers_[static_cast<std::size_t>(from)] = std::move(a.fd);
        --missing;
      }
      a.fd.reset();
    }
    std::erase_if(answering, [](const Answering& a) { return !a.fd; });

    if (missing > 0 && fds[0].revents != 0) {
      for (;;) {
        bootstrap::UniqueFd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (!fd) break;
        tune(fd.get());
        Answering a;
        a.source = bootstrap::peer_address_of(fd.get());
        a.challenge = core::auth::new_challenge();
        a.until = std::min(deadline, core::Clock::now() + std::chrono::seconds(5));
        const std::string problem = send_bytes(fd.get(), a.challenge.data(), a.challenge.size(), a.until);
        if (!problem.empty()) {
          core::auth::log_refusal("control mesh of rank " + std::to_string(rank_), a.source, problem);
          continue;
        }
        a.fd = std::move(fd);
        answering.push_back(std::move(a));
      }
    }
  }
}

std::vector<std::uint8_t> encode_frame(FrameKind kind, std::uint32_t round, std::span<const std::uint8_t> payload) {
  std::vector<std::uint8_t> out(kFrameHeadBytes + payload.size());
  put32(out.data(), kFrameMagic ^ static_cast<std::uint32_t>(kind) << 24);
  put32(out.data() + 4, round);
  put32(out.data() + 8, static_cast<std::uint32_t>(payload.size()));
  if (!payload.empty()) std::memcpy(out.data() + kFrameHeadBytes, payload.data(), payload.size());
  return out;
}

FrameReader::Status FrameReader::next(Frame& out, std::string& why) {
  const std::size_t have = buffer_.size() - start_;
  if (have < kFrameHeadBytes) return Status::NeedMore;
  const std::uint8_t* head = buffer_.data() + start_;
  const std::uint32_t word = get32(head);
  const auto kind = static_cast<std::uint8_t>((word ^ kFrameMagic) >> 24);
  const std::uint32_t length = get32(head + 8);
  if ((word & 0x00ffffffu) != (kFrameMagic & 0x00ffffffu) || kind < 1 || kind > 4) {
    why = "a frame that is not an rdmx control frame";
    return Status::Malformed;
  }
  if (length > max_payload_) {
    why = "a frame of " + std::to_string(length) + " bytes (at most " + std::to_string(max_payload_) + ")";
    return Status::Malformed;
  }
  if (have < kFrameHeadBytes + length) return Status::NeedMore;
  out.kind = static_cast<FrameKind>(kind);
  out.round = get32(head + 4);
  out.payload.assign(head + kFrameHeadBytes, head + kFrameHeadBytes + length);
  start_ += kFrameHeadBytes + length;
  if (start_ == buffer_.size()) {
    buffer_.clear();
    start_ = 0;
  } else if (start_ > 4096) {
    buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(start_));
    start_ = 0;
  }
  return Status::Ready;
}

}  // namespace rdmx::membership
