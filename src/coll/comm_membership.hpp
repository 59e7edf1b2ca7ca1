// SPDX-License-Identifier: MIT
// A communicator's view of the liveness of its ranks (membership/): which
// of them failed, told as soon as the control mesh finds out, and, for
// shrink(), who goes on. The communicators a shrink makes share the first
// one's Membership, so they need no new control connections and a rank
// that dies while one is being built is seen by the same detector.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "coll/gather_all.hpp"
#include "membership/membership.hpp"
#include "rdmx/bootstrap.hpp"
#include "rdmx/error.hpp"
#include "services/mutex.hpp"
#include "services/thread_annotations.hpp"

namespace rdmx::coll {

class CommMembership {
 public:
  // A communicator's own: makes the control mesh (collective) under `tag`.
  CommMembership(std::shared_ptr<Store> store, const std::string& tag, int rank, int size,
                 std::chrono::milliseconds timeout);
  // A shrunk communicator's: `shared` is the first one's; `members` the
  // ranks in it of this communicator's ranks 0, 1, ...; `epoch` the
  // agreement that made it.
  CommMembership(std::shared_ptr<membership::Membership> shared, std::string root_tag, std::vector<int> members,
                 std::uint32_t epoch);
  ~CommMembership();
  CommMembership(const CommMembership&) = delete;
  CommMembership& operator=(const CommMembership&) = delete;

  // Calls `revoke(rank, why)` for every member that failed so far and, on
  // the detector's thread, for each that fails later. detach() stops it
  // (and waits for a call in progress).
  using Revoke = std::function<void(int rank, const std::string& why)>;
  void attach(Revoke revoke);
  void detach();

  // `store` with waits that end, with PeerFailure naming the rank, as soon
  // as a member fails: what a communicator is built through, so that a
  // rank dying meanwhile fails the build at once, not at the timeout.
  std::shared_ptr<Store> watched(std::shared_ptr<Store> store);
  // What every member publishes, exchanged over the control connections
  // (Membership::gather()): the store serves none of it.
  GatherAll gather_all() const;

  // What the next shrink makes.
  struct Next {
    std::uint32_t epoch = 0;
    std::vector<int> members;    // in the Membership's numbering
    int rank = -1;               // this rank's new rank
    std::vector<int> failed;     // in this communicator's numbering
    std::vector<int> survivors;  // ditto: survivors[new rank] = rank here
    std::string tag;             // the new communicator's store prefix
  };
  // Agreement number `epoch` (after this communicator's own), by `deadline`.
  // Throws when this rank cannot go on (see Communicator::shrink()).
  Next agree(std::uint32_t epoch, std::chrono::steady_clock::time_point deadline, int my_rank);
  std::uint32_t epoch() const noexcept { return epoch_; }
  // Whether a member of the communicator `next` describes has failed since.
  bool member_failed(const std::vector<int>& members) const;
  std::unique_ptr<CommMembership> successor(const Next& next) const;
  // The members that failed so far, as "rank 2 (why)", and their ranks.
  std::string failures(std::vector<int>* ranks = nullptr) const;

 private:
  void on_loss(int peer, bool timed_out, const std::string& why);

  std::shared_ptr<membership::Membership> shared_;
  std::string root_tag_;
  std::vector<int> members_;
  std::vector<int> rank_of_;  // Membership rank -> rank here, or -1
  std::uint32_t epoch_ = 0;
  bool owner_ = false;  // made the control mesh
  int subscription_ = -1;

  mutable core::Mutex mutex_;
  struct Loss {
    int rank;
    std::string why;
  };
  std::vector<Loss> losses_ RDMX_GUARDED_BY(mutex_);
  Revoke revoke_ RDMX_GUARDED_BY(mutex_);
};

}  // namespace rdmx::coll
