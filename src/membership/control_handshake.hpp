// SPDX-License-Identifier: MIT
// Control connections being made, without blocking: the ones this rank
// dials and the ones its listener answers, each until the job secret is
// proven. The control mesh drives them at creation and the membership
// thread afterwards, when an agreement needs a peer outside the overlay.
//
// The listener sends a fresh challenge; the dialler answers with who it is
// and HMAC proof of the job secret (services/auth.hpp), and the listener
// acts on nothing else until it checks. Either rank of a pair may dial.
// When both do at once, the higher rank keeps its own connection and
// answers the lower one's "duplicate", so a pair never ends with two
// connections and a peer's frames never arrive on two.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bootstrap/net.hpp"
#include "services/auth.hpp"
#include "services/wait.hpp"

namespace rdmx::membership {

class ControlHandshakes {
 public:
  enum class Admission { Accept, Duplicate, Refuse };
  // Whether a proven hello from `from` may become its connection; on
  // Refuse, `why` says why (for the log).
  using Admit = std::function<Admission(int from, std::string& why)>;

  // `listener`: listening, non-blocking, owned by the caller. A connection
  // whose hello has not come within `answer_within` is dropped; waiting for
  // it holds up nothing else, so the window may be as long as the job's
  // timeout, which a slow host (an emulated guest, an oversubscribed node)
  // needs.
  ControlHandshakes(int rank, int size, std::uint64_t tag_digest, int listener,
                    std::chrono::milliseconds answer_within);

  // Starts connecting to `peer`, which published `published` ("host\nport").
  // "" when under way, else why it cannot start.
  std::string dial(int peer, const std::string& published);
  bool dialing(int peer) const;
  void cancel(int peer);

  struct Outcome {
    int peer = -1;
    bootstrap::UniqueFd fd;  // the connection, proven; empty when it failed or was a duplicate
    std::string problem;     // this rank's dial failed: why
    bool duplicate = false;  // the peer keeps its own connection to this rank instead
  };
  // Accepts what waits on the listener and advances every handshake as far
  // as what has arrived allows; never blocks.
  std::vector<Outcome> progress(const Admit& admit);

  // The sockets to watch for input: the listener and every handshake's.
  std::vector<int> fds() const;
  // Where the dial to `peer` goes, for messages ("" when none).
  std::string where(int peer) const;

 private:
  // A connection this rank opened: it awaits the challenge, then (hello
  // sent) the one-byte answer.
  struct Dialing {
    int peer = -1;
    std::string where;
    bootstrap::UniqueFd fd;
    bool challenged = false;
    std::vector<std::uint8_t> got;
  };
  // A connection a peer opened: it awaits the hello and proof.
  struct Answering {
    bootstrap::UniqueFd fd;
    std::string source;
    core::auth::Challenge challenge{};
    core::Clock::time_point until;
    std::vector<std::uint8_t> got;
  };
  void advance_dial(Dialing& d, std::vector<Outcome>& done);
  void advance_answer(Answering& a, const Admit& admit, std::vector<Outcome>& done);

  int rank_;
  int size_;
  std::uint64_t tag_digest_;
  std::chrono::milliseconds answer_within_;
  int listener_;
  std::vector<Dialing> dialing_;
  std::vector<Answering> answering_;
};

}  // namespace rdmx::membership
