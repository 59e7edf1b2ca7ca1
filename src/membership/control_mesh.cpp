// SPDX-License-Identifier: MIT
#include "membership/control_mesh.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>

#include <cerrno>
#include <cstring>

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

// Waits for `fd` to be readable; false when the deadline passed or waits
// were aborted.
bool wait_readable(int fd, core::Clock::time_point deadline) {
  for (;;) {
    if (core::waits_aborted()) return false;
    const int ready = bootstrap::poll_once(fd, POLLIN, deadline);
    if (ready > 0 || ready == -1) return true;  // an error: the call that follows reports it
    if (ready == 0 && core::Clock::now() >= deadline) return false;
  }
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

std::string recv_bytes(int fd, std::uint8_t* data, std::size_t length, core::Clock::time_point deadline) {
  bool started = false;
  return problem_of(bootstrap::recv_all(fd, reinterpret_cast<char*>(data), length, deadline, started));
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
    : rank_(rank), size_(size), tag_digest_(digest_of(tag)), key_(tag + "/ctl/" + std::to_string(rank)) {
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
  store.set(key_, std::string_view(ip + "\n" + port_text(bound)));
  for (int peer = 0; peer < rank; ++peer) connect_to(store, tag, peer, deadline);
  accept_from_higher(deadline);
  listener_.reset();
}

void ControlMesh::connect_to(Store& store, const std::string& tag, int peer, core::Clock::time_point deadline) {
  const auto context = [&](const std::string& op, const std::string& where) {
    return ErrorContext{
        .op = op,
        .rank = rank_,
        .peer_rank = peer,
        .peer_addr = where,
        .hint =
            "the peer may have died, be unreachable from this host (RDMX_SOCKET_IFNAME), or have its port "
            "refused by a firewall (RDMX_PORT_RANGE); rdmx doctor checks each"};
  };
  const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - core::Clock::now());
  const Bytes published = store.get(tag + "/ctl/" + std::to_string(peer), std::max(wait, std::chrono::milliseconds(1)));
  const std::string text(published.begin(), published.end());
  const std::size_t cut = text.find('\n');
  std::string host = cut == std::string::npos ? text : text.substr(0, cut);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  const int port = cut == std::string::npos ? 0 : std::atoi(text.c_str() + cut + 1);
  std::string error;
  const auto addresses = bootstrap::resolve_tcp(host, static_cast<std::uint16_t>(port), false, error);
  const std::string where = host + ":" + std::to_string(port);
  if (addresses.empty()) {
    throw Error(
        ErrorCode::Config,
        "control mesh: rank " + std::to_string(peer) + " published " + where + ", which does not resolve: " + error,
        context("control mesh connect", where));
  }
  bootstrap::UniqueFd fd(::socket(addresses[0].family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  tune(fd.get());
  if (::connect(fd.get(), addresses[0].get(), addresses[0].length) != 0 && errno != EINPROGRESS) {
    throw Error(ErrorCode::PeerFailure,
                "control mesh: cannot connect to rank " + std::to_string(peer) + ": " + std::strerror(errno),
                context("control mesh connect", where));
  }
  std::uint8_t challenge[core::auth::kChallengeBytes];
  std::string problem = recv_bytes(fd.get(), challenge, sizeof(challenge), deadline);
  if (problem.empty()) {
    std::uint8_t hello[kHelloBytes + core::auth::kProofBytes] = {};
    put32(hello, kHelloMagic);
    hello[4] = kHelloVersion;
    put32(hello + 8, static_cast<std::uint32_t>(rank_));
    put32(hello + 12, static_cast<std::uint32_t>(peer));
    put64(hello + 16, tag_digest_);
    core::auth::Challenge theirs;
    std::memcpy(theirs.data(), challenge, theirs.size());
    const auto proof = core::auth::prove(kPurpose, theirs, std::span<const std::uint8_t>(hello, kHelloBytes));
    std::memcpy(hello + kHelloBytes, proof.data(), proof.size());
    problem = send_bytes(fd.get(), hello, sizeof(hello), deadline);
  }
  std::uint8_t answer = 0;
  if (problem.empty()) problem = recv_bytes(fd.get(), &answer, 1, deadline);
  if (problem.empty() && answer != kAccepted) problem = "it refused this rank";
  if (!problem.empty()) {
    throw Error(problem.find("timed out") != std::string::npos ? ErrorCode::Timeout : ErrorCode::PeerFailure,
                "control mesh: rank " + std::to_string(peer) + " at " + where +
                    " did not take this rank's connection (" + problem + ")",
                context("control mesh handshake", where));
  }
  peers_[static_cast<std::size_t>(peer)] = std::move(fd);
}

void ControlMesh::accept_from_higher(core::Clock::time_point deadline) {
  int missing = size_ - 1 - rank_;
  while (missing > 0) {
    if (!wait_readable(listener_.get(), deadline)) {
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
    bootstrap::UniqueFd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd) continue;
    tune(fd.get());
    const std::string source = bootstrap::peer_address_of(fd.get());
    const core::auth::Challenge challenge = core::auth::new_challenge();
    // A connection that cannot finish its handshake soon is dropped, not
    // waited for: it must not hold up the ranks that do.
    const auto handshake = std::min(deadline, core::Clock::now() + std::chrono::seconds(5));
    std::string problem = send_bytes(fd.get(), challenge.data(), challenge.size(), handshake);
    std::uint8_t hello[kHelloBytes + core::auth::kProofBytes];
    if (problem.empty()) problem = recv_bytes(fd.get(), hello, sizeof(hello), handshake);
    int from = -1;
    if (problem.empty()) {
      from = static_cast<int>(get32(hello + 8));
      core::auth::Proof proof;
      std::memcpy(proof.data(), hello + kHelloBytes, proof.size());
      if (get32(hello) != kHelloMagic || hello[4] != kHelloVersion) {
        problem = "not an rdmx control-mesh hello";
      } else if (!core::auth::verify(kPurpose, challenge, std::span<const std::uint8_t>(hello, kHelloBytes), proof)) {
        problem = "wrong proof of the job secret (RDMX_AUTH_KEY)";
      } else if (get64(hello + 16) != tag_digest_ || static_cast<int>(get32(hello + 12)) != rank_) {
        problem = "a hello for another communicator or rank";
      } else if (from <= rank_ || from >= size_ || peers_[static_cast<std::size_t>(from)]) {
        problem = "rank " + std::to_string(from) + " is not one this rank waits for";
      }
    }
    if (!problem.empty()) {
      core::auth::log_refusal("control mesh of rank " + std::to_string(rank_), source, problem);
      continue;
    }
    const std::uint8_t accepted = kAccepted;
    if (!send_bytes(fd.get(), &accepted, 1, handshake).empty()) continue;
    peers_[static_cast<std::size_t>(from)] = std::move(fd);
    --missing;
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
