// SPDX-License-Identifier: MIT
#include "membership/control_mesh.hpp"

#include <netinet/in.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "membership/overlay.hpp"
#include "rdmx/error.hpp"
#include "services/auth.hpp"
#include "services/hash.hpp"
#include "services/little_endian.hpp"
#include "services/log.hpp"
#include "services/port_range.hpp"
#include "services/socket_iface.hpp"

namespace rdmx::membership {
namespace {

constexpr std::uint32_t kFrameMagic = 0x43584452;  // "RDXC"

std::string port_text(const sockaddr_storage& address) {
  const auto* in4 = reinterpret_cast<const sockaddr_in*>(&address);
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&address);
  return std::to_string(ntohs(address.ss_family == AF_INET6 ? in6->sin6_port : in4->sin_port));
}

// Listens where RDMX_SOCKET_IFNAME points; `published` becomes "host\nport".
bootstrap::UniqueFd listen_for_peers(int rank, int size, std::string& published) {
  const core::SocketInterface iface = core::choose_interface();
  sockaddr_storage bound = iface.address;
  const core::PortRange ports = core::port_range();
  bootstrap::UniqueFd listener(::socket(bound.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  socklen_t length = iface.address_len;
  int bind_error = 0;
  if (listener && (bind_error = core::bind_in_port_range(listener.get(), bound, length, ports)) != 0)
    errno = bind_error;
  if (!listener || bind_error != 0 || ::listen(listener.get(), std::clamp(size, 16, 4096)) != 0 ||
      ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
    throw Error(ErrorCode::Config,
                std::string("control mesh: cannot listen on ") + iface.name + " (" +
                    core::format_address(reinterpret_cast<const sockaddr*>(&iface.address)) + ", ports " +
                    ports.text() + "): " + std::strerror(errno),
                ErrorContext{.op = "control mesh listen",
                             .rank = rank,
                             .hint = "check RDMX_SOCKET_IFNAME, and that RDMX_PORT_RANGE has free ports"});
  }
  const std::string host = bootstrap::to_string(reinterpret_cast<const sockaddr*>(&bound), length);
  published = host.substr(0, host.rfind(':')) + "\n" + port_text(bound);
  return listener;
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

std::string ranks_text(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

// As long as creation may take: at least a few seconds, at most an hour
// (a deadline of "never" would otherwise keep a silent connection forever).
std::chrono::milliseconds answer_window(core::Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - core::Clock::now());
  return std::clamp<std::chrono::milliseconds>(left, std::chrono::seconds(5), std::chrono::hours(1));
}

}  // namespace

ControlMesh::ControlMesh(Store& store, const std::string& tag, int rank, int size, core::Clock::time_point deadline)
    : rank_(rank),
      size_(size),
      tag_digest_(core::fnv1a64(tag)),
      listener_(listen_for_peers(rank, size, mine_)),
      handshakes_(rank, size, tag_digest_, listener_.get(), answer_window(deadline)),
      peers_(static_cast<std::size_t>(size)),
      overlay_(overlay_neighbours(rank, size)) {
  core::auth::warn_if_unauthenticated("the control mesh");
  connect_overlay(store, tag, mine_, deadline);
  addresses_ = gather_over_overlay(peers_, rank_, size_, mine_, deadline);
}

// When both ranks of a pair dial, the higher one's connection wins: the
// higher answers the lower's "duplicate" while its own dial is under way,
// and also once it is made, since the lower may have adopted it already.
ControlHandshakes::Admission ControlMesh::admit(int from, std::string& why) const {
  const bool connected = static_cast<bool>(peers_[static_cast<std::size_t>(from)]);
  if (from < rank_ && (connected || handshakes_.dialing(from))) return ControlHandshakes::Admission::Duplicate;
  if (connected) {
    why = "rank " + std::to_string(from) + " is connected already";
    return ControlHandshakes::Admission::Refuse;
  }
  return ControlHandshakes::Admission::Accept;
}

// Every overlay connection of this rank at once, dialled and answered in one
// poll loop: a rank that handshook one peer after the other made each wait
// for all the lower ones, and the ranks' set-up times added up.
void ControlMesh::connect_overlay(Store& store, const std::string& tag, const std::string& mine,
                                  core::Clock::time_point deadline) {
  const auto key_of = [&](int r) { return tag + "/ctl/" + std::to_string(r); };
  const auto left = [&] {
    return std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - core::Clock::now()),
                    std::chrono::milliseconds(1));
  };
  store.set(key_of(rank_), std::string_view(mine));
  std::vector<int> lower;
  std::vector<int> higher;
  for (int peer : overlay_) (peer < rank_ ? lower : higher).push_back(peer);
  std::vector<std::string> keys;
  for (int peer : lower) keys.push_back(key_of(peer));
  if (!keys.empty()) {
    try {
      store.wait(keys, left());
    } catch (const Error& e) {
      std::vector<int> missing;
      for (int peer : lower) {
        if (!store.check(key_of(peer))) missing.push_back(peer);
      }
      throw Error(
          e.code(),
          "control mesh: ranks " + ranks_text(missing) + " did not publish their control address: " + e.message(),
          ErrorContext{.op = "control mesh connect",
                       .rank = rank_,
                       .peer_rank = missing.empty() ? -1 : missing.front(),
                       .hint = "those ranks did not create the communicator in time (crashed, hung, or "
                               "another tag or store)"});
    }
  }
  for (int peer : lower) {
    const std::string problem = handshakes_.dial(peer, store.get_string(key_of(peer)));
    if (!problem.empty()) {
      throw Error(ErrorCode::PeerFailure, "control mesh: rank " + std::to_string(peer) + ": " + problem,
                  dial_context(rank_, peer, "control mesh connect", handshakes_.where(peer)));
    }
  }
  const auto missing = [&](const std::vector<int>& ranks) {
    std::vector<int> out;
    for (int peer : ranks) {
      if (!peers_[static_cast<std::size_t>(peer)]) out.push_back(peer);
    }
    return out;
  };
  const ControlHandshakes::Admit admit = [this](int from, std::string& why) { return this->admit(from, why); };
  std::vector<pollfd> fds;
  while (!missing(lower).empty() || !missing(higher).empty()) {
    const auto now = core::Clock::now();
    if (now >= deadline || core::waits_aborted()) {
      const std::string how = core::waits_aborted() ? "waits were aborted" : "timed out";
      const std::vector<int> dialled = missing(lower);
      if (!dialled.empty()) {
        const int peer = dialled.front();
        throw Error(core::waits_aborted() ? ErrorCode::PeerFailure : ErrorCode::Timeout,
                    "control mesh: rank " + std::to_string(peer) + " at " + handshakes_.where(peer) +
                        " did not take this rank's connection (" + how + ")",
                    dial_context(rank_, peer, "control mesh handshake", handshakes_.where(peer)));
      }
      throw Error(
          ErrorCode::Timeout,
          "control mesh: ranks " + ranks_text(missing(higher)) + " never connected to rank " + std::to_string(rank_),
          ErrorContext{.op = "control mesh accept",
                       .rank = rank_,
                       .hint = "those ranks did not create the communicator in time, or cannot reach this host"});
    }
    fds.clear();
    for (int fd : handshakes_.fds()) fds.push_back({fd, POLLIN, 0});
    const auto slice = std::min(deadline - now, core::Clock::duration(std::chrono::milliseconds(100)));
    const int ms =
        static_cast<int>(std::max<long long>(std::chrono::ceil<std::chrono::milliseconds>(slice).count(), 1));
    if (::poll(fds.data(), fds.size(), ms) <= 0) continue;
    for (ControlHandshakes::Outcome& o : handshakes_.progress(admit)) {
      if (o.fd) {
        if (!peers_[static_cast<std::size_t>(o.peer)]) peers_[static_cast<std::size_t>(o.peer)] = std::move(o.fd);
      } else if (!o.problem.empty()) {
        throw Error(
            ErrorCode::PeerFailure,
            "control mesh: rank " + std::to_string(o.peer) + " did not take this rank's connection (" + o.problem + ")",
            dial_context(rank_, o.peer, "control mesh handshake", ""));
      }
    }
  }
  // Every rank that reads this rank's address dials it, and all of them have.
  store.remove(key_of(rank_));
}

std::vector<std::uint8_t> encode_frame(FrameKind kind, std::uint32_t round, std::span<const std::uint8_t> payload) {
  std::vector<std::uint8_t> out(kFrameHeadBytes + payload.size());
  core::put_le32(out.data(), kFrameMagic ^ static_cast<std::uint32_t>(kind) << 24);
  core::put_le32(out.data() + 4, round);
  core::put_le32(out.data() + 8, static_cast<std::uint32_t>(payload.size()));
  if (!payload.empty()) std::memcpy(out.data() + kFrameHeadBytes, payload.data(), payload.size());
  return out;
}

FrameReader::Status FrameReader::next(Frame& out, std::string& why) {
  const std::size_t have = buffer_.size() - start_;
  if (have < kFrameHeadBytes) return Status::NeedMore;
  const std::uint8_t* head = buffer_.data() + start_;
  const std::uint32_t word = core::get_le32(head);
  const auto kind = static_cast<std::uint8_t>((word ^ kFrameMagic) >> 24);
  const std::uint32_t length = core::get_le32(head + 8);
  if ((word & 0x00ffffffu) != (kFrameMagic & 0x00ffffffu) || kind < 1 || kind > 5) {
    why = "a frame that is not an rdmx control frame";
    return Status::Malformed;
  }
  if (length > max_payload_) {
    why = "a frame of " + std::to_string(length) + " bytes (at most " + std::to_string(max_payload_) + ")";
    return Status::Malformed;
  }
  if (have < kFrameHeadBytes + length) return Status::NeedMore;
  out.kind = static_cast<FrameKind>(kind);
  out.round = core::get_le32(head + 4);
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
