// SPDX-License-Identifier: MIT
// The control mesh: authenticated TCP connections between the ranks of a
// communicator, apart from its data path. Heartbeats and the agreement on
// who failed travel on it, so a data path that failed, or a store that died
// with the rank that served it, does not blind the survivors; and the
// kernel closes a killed process's sockets, which tells its peers at once.
//
// Set-up is collective and makes only the overlay (overlay.hpp): each rank
// listens on the interface RDMX_SOCKET_IFNAME picks, publishes its address
// in the store, reads those of its lower overlay neighbours, dials them and
// answers its higher ones (control_handshake.hpp); then the ranks exchange
// every rank's address over the overlay. The listener stays open, so a
// connection to any other rank can be made later, when an agreement needs
// one, without the store.
//
// After set-up, each connection carries frames: a 12-byte head (magic,
// kind, round, payload length) and a payload bounded by the group's size.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "bootstrap/net.hpp"
#include "membership/control_handshake.hpp"
#include "rdmx/bootstrap.hpp"
#include "services/wait.hpp"

namespace rdmx::membership {

class ControlMesh {
 public:
  // Collective over `size` ranks; throws Error (Timeout naming the ranks not
  // reached, or PeerFailure/Config) when the overlay cannot be made by
  // `deadline`.
  ControlMesh(Store& store, const std::string& tag, int rank, int size, core::Clock::time_point deadline);
  ControlMesh(const ControlMesh&) = delete;
  ControlMesh& operator=(const ControlMesh&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  // The connection to `peer` (non-blocking), or -1 when there is none.
  int fd(int peer) const noexcept { return peers_[static_cast<std::size_t>(peer)].get(); }
  void close(int peer) noexcept { peers_[static_cast<std::size_t>(peer)].reset(); }
  // Takes a connection the handshakes made after set-up.
  void adopt(int peer, bootstrap::UniqueFd fd) { peers_[static_cast<std::size_t>(peer)] = std::move(fd); }
  // Where `peer` listens, as it published it: for dialling it later.
  const std::string& address(int peer) const { return addresses_[static_cast<std::size_t>(peer)]; }
  // The connections set-up made (overlay.hpp).
  const std::vector<int>& overlay() const noexcept { return overlay_; }
  ControlHandshakes& handshakes() noexcept { return handshakes_; }
  // The rule for a hello from `from` while the connections are as they are.
  ControlHandshakes::Admission admit(int from, std::string& why) const;

 private:
  void connect_overlay(Store& store, const std::string& tag, const std::string& mine, core::Clock::time_point deadline);

  int rank_;
  int size_;
  std::uint64_t tag_digest_;
  std::string mine_;  // this rank's address as published: "host\nport"
  bootstrap::UniqueFd listener_;
  ControlHandshakes handshakes_;
  std::vector<bootstrap::UniqueFd> peers_;
  std::vector<std::string> addresses_;
  std::vector<int> overlay_;
};

// ---- frames ----------------------------------------------------------------
enum class FrameKind : std::uint8_t {
  Beat = 1,     // I am alive
  Propose = 2,  // agreement: (round, suspected ranks)
  Decide = 3,   // agreement: the decided set of failed ranks
  Bye = 4,      // this rank closes its communicator: the connection's end is no failure
  Gather = 5,   // one step of an all-gather (Membership::gather()): (step, exchange id, values)
};
inline constexpr std::size_t kFrameHeadBytes = 12;

struct Frame {
  FrameKind kind = FrameKind::Beat;
  std::uint32_t round = 0;
  std::vector<std::uint8_t> payload;
};

std::vector<std::uint8_t> encode_frame(FrameKind kind, std::uint32_t round, std::span<const std::uint8_t> payload);

// Cuts a byte stream from one peer into frames; bytes are checked as they
// arrive (a peer of the job, but a bug there must not become one here).
class FrameReader {
 public:
  explicit FrameReader(std::size_t max_payload) : max_payload_(max_payload) {}
  void feed(const std::uint8_t* data, std::size_t length) { buffer_.insert(buffer_.end(), data, data + length); }
  enum class Status { NeedMore, Ready, Malformed };
  // Ready: `out` holds the next frame. Malformed: `why` says what was wrong.
  Status next(Frame& out, std::string& why);

 private:
  std::size_t max_payload_;
  std::vector<std::uint8_t> buffer_;
  std::size_t start_ = 0;
};

}  // namespace rdmx::membership
