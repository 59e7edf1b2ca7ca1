// SPDX-License-Identifier: MIT
// The control mesh: one authenticated TCP connection between every two ranks
// of a communicator, apart from its data path. Heartbeats and the agreement
// on who failed travel on it, so a data path that failed, or a store that
// died with the rank that served it, does not blind the survivors; and the
// kernel closes a killed process's sockets, which tells its peers at once.
//
// Set-up is collective: each rank listens on the interface RDMX_SOCKET_IFNAME
// picks, publishes its address, learns everyone's through the store in a
// handful of requests (bootstrap/store_gather.hpp), connects to every lower
// rank and accepts every higher one. The listener sends a fresh challenge; the
// connector answers with who it is and HMAC proof of the job secret
// (services/auth.hpp), and the listener acts on nothing else until it checks.
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
#include "rdmx/bootstrap.hpp"
#include "services/wait.hpp"

namespace rdmx::membership {

class ControlMesh {
 public:
  // Collective over `size` ranks; throws Error (Timeout naming the ranks not
  // reached, or PeerFailure/Config) when the mesh cannot be made by `deadline`.
  ControlMesh(Store& store, const std::string& tag, int rank, int size, core::Clock::time_point deadline);
  ControlMesh(const ControlMesh&) = delete;
  ControlMesh& operator=(const ControlMesh&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  // The connection to `peer` (non-blocking), or -1 once closed.
  int fd(int peer) const noexcept { return peers_[static_cast<std::size_t>(peer)].get(); }
  void close(int peer) noexcept { peers_[static_cast<std::size_t>(peer)].reset(); }

 private:
  void handshake_all(const std::vector<std::string>& published, core::Clock::time_point deadline);

  int rank_;
  int size_;
  std::uint64_t tag_digest_;
  bootstrap::UniqueFd listener_;
  std::vector<bootstrap::UniqueFd> peers_;
};

// ---- frames ----------------------------------------------------------------
enum class FrameKind : std::uint8_t {
  Beat = 1,     // I am alive
  Propose = 2,  // agreement: (round, suspected ranks)
  Decide = 3,   // agreement: the decided set of failed ranks
  Bye = 4,      // this rank closes its communicator: the connection's end is no failure
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
