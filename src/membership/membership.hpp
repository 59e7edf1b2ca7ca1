// SPDX-License-Identifier: MIT
// Who in a communicator is alive, and what its survivors agree has failed.
//
// A Membership owns the communicator's control mesh and one thread that
// watches it: it sends a heartbeat to every peer it is connected to (its
// overlay neighbours, overlay.hpp) each heartbeat period and suspects a
// peer whose connection closed (a killed process: at once) or that sent
// nothing for the timeout (a stopped, hung or cut-off one). Each rank is
// watched by its neighbours, and the first suspicion starts the agreement
// (agreement.hpp) on every rank, in the background, so the decision is
// ready by the time an application asks for it; the handler given at
// creation hears of each failed peer as soon as it is suspected, locally or
// in a peer's report, which is how a communicator revokes itself. The
// agreement sends to every live rank: the thread connects to the ones
// outside the overlay when it first has something for them, and a peer it
// cannot connect to within the timeout is suspected like a silent one.
//
// Agreements are numbered: the n-th decides who failed out of the group the
// (n-1)-th left (the first, out of the whole group). Each shrink of a
// communicator asks for the next one, so a rank that died while the last
// shrink was being built is agreed on by the next.
//
// A decision counts only with a quorum of the group it started from: a majority goes on;
// exactly half goes on only if it wins the tie in the store (the first half
// to write its decision there; a store nobody reaches decides nothing, and
// then neither half goes on); fewer refuse. So the two sides of a cut never
// both go on.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "membership/agreement.hpp"
#include "membership/control_mesh.hpp"
#include "rdmx/bootstrap.hpp"
#include "services/mutex.hpp"
#include "services/thread_annotations.hpp"
#include "services/wait.hpp"

namespace rdmx::membership {

struct Verdict {
  enum class Outcome {
    Go,             // this rank is a survivor with a quorum
    Excluded,       // the others declared this rank failed
    Minority,       // fewer than half of the old group can reach each other
    TieLost,        // exactly half, and the other half won the tie
    TieUnresolved,  // exactly half, and the store that breaks ties was not reachable
  };
  Outcome outcome = Outcome::Go;
  RankSet failed;
  std::vector<int> survivors;  // old ranks, in order: the new group's ranks 0, 1, ...
  // Why each failed rank is counted failed ("rank 2: its control connection
  // closed (seen by rank 0)"), or why this rank cannot go on.
  std::string why;
};
const char* to_string(Verdict::Outcome outcome) noexcept;

class Membership {
 public:
  // Called on the watching thread, once per peer, when it is first suspected
  // (locally or on a peer's report); `timed_out` when it fell silent rather
  // than closed.
  using FailureHandler = std::function<void(int peer, bool timed_out, const std::string& why)>;

  // Collective: makes the control mesh through `store` under `tag`. A
  // `timeout` below zero disables the silence check (closed connections are
  // still seen).
  Membership(std::shared_ptr<Store> store, const std::string& tag, int rank, int size,
             std::chrono::milliseconds timeout, FailureHandler on_failure);
  // Says goodbye to every peer (so they do not count this rank failed) and
  // stops the thread.
  ~Membership();
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  // The control connections open now: the overlay's after creation, more
  // once an agreement needed them.
  int connections() const;

  // Adds a handler, called as the one given at creation is; it hears at once
  // (on this thread) of every peer already suspected. Returns an id for
  // unsubscribe(), which waits for a call in progress to end.
  int subscribe(FailureHandler handler);
  void unsubscribe(int id);

  // The verdict of agreement number `epoch` (1 for the first), starting it
  // when nothing has; blocks until it is decided and the quorum is known, at
  // most until `deadline` (then throws Error(Timeout) naming the ranks still
  // awaited).
  Verdict agree(std::uint32_t epoch, core::Clock::time_point deadline);

  // Collective over `members` (ranks of this Membership, this one among
  // them): every member's `mine`, indexed as `members`, exchanged over the
  // control connections in log2 of their count steps (overlay.hpp), so no
  // store serves N x N bytes. `key` names the exchange, the same on every
  // member; `what` names the values in errors. Throws PeerFailure as soon
  // as a member is suspected, and Timeout at `deadline` naming the member
  // awaited.
  std::vector<std::string> gather(const std::string& key, const std::vector<int>& members, const std::string& mine,
                                  const char* what, core::Clock::time_point deadline);

 private:
  struct Peer;
  void run();
  void handle_readable(int peer) RDMX_REQUIRES(mutex_);
  void handle_frame(int peer, const Frame& frame) RDMX_REQUIRES(mutex_);
  void lose(int peer, bool timed_out, const std::string& why) RDMX_REQUIRES(mutex_);
  void sync_suspects() RDMX_REQUIRES(mutex_);
  void queue_frame(int peer, FrameKind kind, std::uint32_t round, std::span<const std::uint8_t> payload)
      RDMX_REQUIRES(mutex_);
  void flush(int peer) RDMX_REQUIRES(mutex_);
  void close_peer(int peer) RDMX_REQUIRES(mutex_);
  // Asks for a connection to `peer` (an agreement has something for it).
  void connect(int peer) RDMX_REQUIRES(mutex_);
  void open_peer(int peer) RDMX_REQUIRES(mutex_);
  void watch_handshakes() RDMX_REQUIRES(mutex_);
  void progress_handshakes() RDMX_REQUIRES(mutex_);
  void send_agreement() RDMX_REQUIRES(mutex_);
  void begin_epoch() RDMX_REQUIRES(mutex_);
  void note_decision() RDMX_REQUIRES(mutex_);
  void wake() noexcept;
  Verdict settle_quorum(Verdict verdict, const RankSet& before, std::uint32_t epoch);
  struct Gathering;
  void drive_gatherings() RDMX_REQUIRES(mutex_);
  // After the handlers heard of this pass's losses.
  void tell_gather_failures() RDMX_EXCLUDES(mutex_);
  void take_gather_frame(int peer, const Frame& frame) RDMX_REQUIRES(mutex_);

  std::shared_ptr<Store> store_;
  std::string tag_;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  ControlMesh mesh_;
  std::chrono::milliseconds heartbeat_;  // after mesh_: it depends on the connections made
  bootstrap::UniqueFd epoll_;
  bootstrap::UniqueFd wake_fd_;
  std::atomic<bool> stopping_{false};
  core::WaitWord decided_word_;

  mutable core::Mutex mutex_;
  std::uint32_t epoch_ RDMX_GUARDED_BY(mutex_) = 1;
  Agreement agreement_ RDMX_GUARDED_BY(mutex_);             // number epoch_
  std::vector<RankSet> decisions_ RDMX_GUARDED_BY(mutex_);  // of agreements 1, 2, ...
  std::vector<Peer> peers_ RDMX_GUARDED_BY(mutex_);
  std::vector<int> watched_ RDMX_GUARDED_BY(mutex_);  // the handshakes' sockets in epoll_
  std::vector<std::shared_ptr<Gathering>> gatherings_ RDMX_GUARDED_BY(mutex_);
  // Steps of exchanges that arrived before this rank reached them: by
  // (exchange id, step, sender).
  std::map<std::tuple<std::uint64_t, std::uint32_t, int>, std::vector<std::uint8_t>> early_steps_
      RDMX_GUARDED_BY(mutex_);
  core::WaitWord gathered_word_;
  std::vector<std::string> reasons_ RDMX_GUARDED_BY(mutex_);
  std::uint32_t start_asked_ RDMX_GUARDED_BY(mutex_) = 0;  // the agreement an application waits for
  // The losses one pass of the thread found, told to the handlers after it lets go of mutex_.
  std::vector<std::tuple<int, bool, std::string>> found_ RDMX_GUARDED_BY(mutex_);
  // Held while handlers run, so unsubscribe() returns only when none does.
  core::Mutex handlers_mutex_;
  std::vector<std::pair<int, FailureHandler>> handlers_ RDMX_GUARDED_BY(handlers_mutex_);
  int next_handler_ RDMX_GUARDED_BY(handlers_mutex_) = 0;
  struct Loss {
    int peer;
    bool timed_out;
    std::string why;
  };
  std::vector<Loss> losses_ RDMX_GUARDED_BY(handlers_mutex_);  // every one so far, for late subscribers
  std::thread thread_;
};

}  // namespace rdmx::membership
