// SPDX-License-Identifier: MIT
#include "membership/agreement.hpp"

#include <utility>

#include "rdmx/error.hpp"

namespace rdmx::membership {

Agreement::Agreement(int rank, int size, const RankSet& already_failed)
    : rank_(rank),
      size_(size),
      suspects_(size),
      sent_(size),
      decision_(size),
      reporter_(static_cast<std::size_t>(size), -1),
      inbox_(static_cast<std::size_t>(size)) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw Error(ErrorCode::InvalidArgument,
                "agreement: rank " + std::to_string(rank) + " of " + std::to_string(size) + " is not a rank");
  }
  if (already_failed.size() == size) suspects_ = already_failed;
}

void Agreement::suspect(int peer) {
  if (!lose_locally(peer)) return;
  if (!active_) {
    start();
    return;
  }
  advance();
}

void Agreement::depart(int peer) {
  if (lose_locally(peer)) advance();
}

bool Agreement::lose_locally(int peer) {
  if (peer == rank_ || peer < 0 || peer >= size_ || decided_ || excluded()) return false;
  if (suspects_.insert(peer)) reporter_[peer] = rank_;
  return true;
}

void Agreement::start() {
  if (active_ || decided_ || excluded()) return;
  active_ = true;
  begin_round();
  advance();
}

void Agreement::receive(int from, const AgreementMessage& message) {
  if (from < 0 || from >= size_ || from == rank_ || excluded()) return;
  if (message.set.size() != size_) return;
  if (message.set.contains(rank_)) {
    // Whoever says so has stopped talking to this rank; there is no way back in.
    excluded_by_ = from;
    active_ = false;
    outgoing_.clear();
    return;
  }
  if (decided_) return;  // the decision already went to every survivor
  if (suspects_.contains(from)) return;
  if (message.kind == AgreementMessage::Kind::Decide) {
    adopt(message.set);
    return;
  }
  learn(message.set, from);
  inbox_[from][message.round] = message.set;
  if (!active_) {
    start();
    return;
  }
  advance();
}

void Agreement::learn(const RankSet& set, int from) {
  for (int r : set.members()) {
    if (suspects_.insert(r)) reporter_[r] = from;
  }
}

void Agreement::begin_round() {
  ++round_;
  sent_ = suspects_;
  AgreementMessage message;
  message.kind = AgreementMessage::Kind::Propose;
  message.round = round_;
  message.set = sent_;
  send_to_live(message);
}

void Agreement::advance() {
  // A round ends when every peer still trusted has sent its set for it;
  // messages of the next round may already be waiting, so loop.
  while (active_ && !decided_) {
    bool unanimous = true;
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_ || suspects_.contains(peer)) continue;
      auto it = inbox_[peer].find(round_);
      if (it == inbox_[peer].end()) return;
      if (!(it->second == sent_)) unanimous = false;
    }
    if (unanimous && suspects_ == sent_) {
      adopt(sent_);
      return;
    }
    for (auto& box : inbox_) box.erase(round_);
    begin_round();
  }
}

void Agreement::adopt(const RankSet& set) {
  decided_ = true;
  active_ = false;
  decision_ = set;
  for (int r : set.members()) {
    if (suspects_.insert(r)) reporter_[r] = -1;
  }
  AgreementMessage message;
  message.kind = AgreementMessage::Kind::Decide;
  message.set = set;
  send_to_live(message);
}

void Agreement::send_to_live(const AgreementMessage& message) {
  for (int peer = 0; peer < size_; ++peer) {
    if (peer != rank_ && !message.set.contains(peer)) outgoing_.push_back({peer, message});
  }
}

std::vector<AddressedMessage> Agreement::take_outgoing() { return std::exchange(outgoing_, {}); }

std::vector<int> Agreement::awaiting() const {
  std::vector<int> out;
  if (!active_) return out;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_ || suspects_.contains(peer)) continue;
    if (!inbox_[peer].contains(round_)) out.push_back(peer);
  }
  return out;
}

int Agreement::reported_by(int rank) const noexcept { return rank >= 0 && rank < size_ ? reporter_[rank] : -1; }

Quorum quorum_of(const RankSet& failed, const RankSet& before) {
  const int live = failed.size() - failed.count();
  const int group = before.size() - before.count();
  if (2 * live > group) return Quorum::Majority;
  if (2 * live == group) return Quorum::Tie;
  return Quorum::Minority;
}

}  // namespace rdmx::membership
