// SPDX-License-Identifier: MIT
// Agreement on who failed: the survivors of a communicator settle on one set
// of failed ranks with no coordinator, so the death of any rank, during the
// agreement too, cannot stop it.
//
// Flooding in rounds over a failure detector: in round r every live rank
// sends the set it suspects to every rank it does not suspect, and waits for
// the round-r set of each of those (or for suspecting them). What arrives is
// added to its own set, so one rank's detection becomes everyone's. A rank
// decides when, in one round, its set did not grow and every set it received
// equals it; it then sends the decision, and a rank that receives one adopts
// it and passes it on. A rank that receives a set holding itself has been
// declared failed and stops.
//
// Why the deciders agree: a decision at round r means every rank outside the
// set sent that same set in round r, so any two ranks outside it start r
// equal; a rank still undecided after r waits for the decider's next message,
// which is the decision. Two disjoint sides of a partition can both decide;
// the quorum rule below lets at most one of them go on.
//
// The state machine does no I/O and reads no clock: the control mesh feeds
// it events and sends what it returns, which keeps it testable message by
// message.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "membership/rank_set.hpp"

namespace rdmx::membership {

struct AgreementMessage {
  enum class Kind : std::uint8_t { Propose = 1, Decide = 2 };
  Kind kind = Kind::Propose;
  std::uint32_t round = 0;  // Propose only
  RankSet set;
};

struct AddressedMessage {
  int to = -1;
  AgreementMessage message;
};

class Agreement {
 public:
  // `already_failed`: what earlier agreements of the group decided; those
  // ranks take no part and stay failed.
  Agreement(int rank, int size, const RankSet& already_failed);
  Agreement(int rank, int size) : Agreement(rank, size, RankSet(size)) {}

  // The local failure detector lost `peer` (it died, stopped, or said it left).
  void suspect(int peer);
  // `peer` closed its communicator in good order: not a failure, so nothing
  // starts, but no agreement waits for it and none keeps it.
  void depart(int peer);
  // Starts agreeing without a suspicion (an application that asks to shrink).
  void start();
  // A message from `from`, delivered in the order `from` sent it.
  void receive(int from, const AgreementMessage& message);

  // What to send now, in order; each call returns only the new ones.
  std::vector<AddressedMessage> take_outgoing();

  bool active() const noexcept { return active_; }
  bool decided() const noexcept { return decided_; }
  // A peer's set named this rank: the others go on without it.
  bool excluded() const noexcept { return excluded_by_ >= 0; }
  int excluded_by() const noexcept { return excluded_by_; }
  // Every rank suspected so far, from this rank's detector and from others.
  const RankSet& suspects() const noexcept { return suspects_; }
  // Valid once decided().
  const RankSet& decision() const noexcept { return decision_; }
  std::uint32_t round() const noexcept { return round_; }
  // Live peers whose message for the current round has not arrived.
  std::vector<int> awaiting() const;
  // The rank whose report first added `rank` to this rank's suspects (this
  // rank itself when its own detector did), or -1.
  int reported_by(int rank) const noexcept;

 private:
  void learn(const RankSet& set, int from);
  // This rank's own detector lost `peer`; false when that changes nothing
  // the agreement may still act on.
  bool lose_locally(int peer);
  void begin_round();
  void advance();
  void adopt(const RankSet& set);
  void send_to_live(const AgreementMessage& message);

  int rank_;
  int size_;
  bool active_ = false;
  bool decided_ = false;
  int excluded_by_ = -1;
  std::uint32_t round_ = 0;
  RankSet suspects_;
  RankSet sent_;  // the set this rank sent in the current round
  RankSet decision_;
  std::vector<int> reporter_;
  // Per peer, the sets it sent, by round (at most the current and the next).
  std::vector<std::map<std::uint32_t, RankSet>> inbox_;
  std::vector<AddressedMessage> outgoing_;
};

// Whether a decided set leaves enough survivors to go on: of the group the
// agreement started from (all ranks but `before`), more than half remain:
// Majority; exactly half: Tie (the two halves of a cut cannot tell each
// other apart, so something both can reach must pick one); fewer: Minority.
enum class Quorum { Majority, Tie, Minority };
Quorum quorum_of(const RankSet& failed, const RankSet& before);
inline Quorum quorum_of(const RankSet& failed) { return quorum_of(failed, RankSet(failed.size())); }

}  // namespace rdmx::membership
