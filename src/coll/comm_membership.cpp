// SPDX-License-Identifier: MIT
#include "coll/comm_membership.hpp"

#include <algorithm>

namespace rdmx::coll {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Blocking reads in slices, checking between them whether a member died:
// a build waiting on a dead rank's key fails within a slice.
class WatchedStore final : public Store {
 public:
  WatchedStore(std::shared_ptr<Store> inner, const CommMembership& membership, std::vector<int> members)
      : inner_(std::move(inner)), membership_(membership), members_(std::move(members)) {}

  void set(const std::string& key, const Bytes& value) override { inner_->set(key, value); }
  std::int64_t add(const std::string& key, std::int64_t delta) override { return inner_->add(key, delta); }
  bool remove(const std::string& key) override { return inner_->remove(key); }
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    return inner_->compare_set(key, expected, desired);
  }
  bool check(const std::string& key) override { return inner_->check(key); }
  StoreStats stats() override { return inner_->stats(); }

  Bytes get(const std::string& key, milliseconds timeout) override {
    Bytes out;
    sliced(timeout, [&](milliseconds slice) { out = inner_->get(key, slice); });
    return out;
  }
  void wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    sliced(timeout, [&](milliseconds slice) { inner_->wait(keys, slice); });
  }

 private:
  static constexpr milliseconds kSlice{100};

  void sliced(milliseconds timeout, const std::function<void(milliseconds)>& op) {
    const auto deadline = timeout.count() < 0 ? Clock::time_point::max() : Clock::now() + timeout;
    for (;;) {
      check_members();
      const auto left = deadline == Clock::time_point::max()
                            ? kSlice
                            : std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      const bool last = left <= kSlice;
      try {
        op(last ? std::max(left, milliseconds(1)) : kSlice);
        return;
      } catch (const Error& e) {
        if (e.code() != ErrorCode::Timeout) throw;
        if (last) {
          check_members();
          throw;
        }
      }
    }
  }

  void check_members() const {
    if (!membership_.member_failed(members_)) return;
    std::vector<int> ranks;
    const std::string failures = membership_.failures(&ranks);
    throw Error(ErrorCode::PeerFailure, "a rank failed while the communicator was being made: " + failures,
                {.op = "communicator set-up",
                 .peer_rank = ranks.size() == 1 ? ranks[0] : -1,
                 .hint = "shrink() again to leave it out",
                 .failed_ranks = ranks});
  }

  std::shared_ptr<Store> inner_;
  const CommMembership& membership_;
  std::vector<int> members_;
};

std::vector<int> identity(int size) {
  std::vector<int> out(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) out[static_cast<std::size_t>(r)] = r;
  return out;
}

}  // namespace

CommMembership::CommMembership(std::shared_ptr<Store> store, const std::string& tag, int rank, int size,
                               milliseconds timeout)
    : CommMembership(std::make_shared<membership::Membership>(std::move(store), tag, rank, size, timeout, nullptr), tag,
                     identity(size), 0) {
  owner_ = true;
}

CommMembership::CommMembership(std::shared_ptr<membership::Membership> shared, std::string root_tag,
                               std::vector<int> members, std::uint32_t epoch)
    : shared_(std::move(shared)),
      root_tag_(std::move(root_tag)),
      members_(std::move(members)),
      rank_of_(static_cast<std::size_t>(shared_->size()), -1),
      epoch_(epoch) {
  for (std::size_t r = 0; r < members_.size(); ++r)
    rank_of_[static_cast<std::size_t>(members_[r])] = static_cast<int>(r);
  subscription_ =
      shared_->subscribe([this](int peer, bool timed_out, const std::string& why) { on_loss(peer, timed_out, why); });
}

CommMembership::~CommMembership() {
  detach();
  shared_->unsubscribe(subscription_);
}

GatherAll CommMembership::gather_all() const {
  return [shared = shared_, members = members_](const std::string& key, const std::string& mine, const char* what,
                                                core::Clock::time_point deadline) {
    return shared->gather(key, members, mine, what, deadline);
  };
}

void CommMembership::on_loss(int peer, bool, const std::string& why) {
  // Dead or silent alike: the peer died or stopped answering (PeerFailure).
  const int rank = rank_of_[static_cast<std::size_t>(peer)];
  if (rank < 0) return;
  core::LockGuard lock(mutex_);
  losses_.push_back({rank, why});
  if (revoke_) revoke_(rank, "rank " + std::to_string(rank) + " failed: " + why);
}

void CommMembership::attach(Revoke revoke) {
  core::LockGuard lock(mutex_);
  revoke_ = std::move(revoke);
  for (const Loss& loss : losses_) revoke_(loss.rank, "rank " + std::to_string(loss.rank) + " failed: " + loss.why);
}

void CommMembership::detach() {
  core::LockGuard lock(mutex_);
  revoke_ = nullptr;
}

std::shared_ptr<Store> CommMembership::watched(std::shared_ptr<Store> store) {
  return std::make_shared<WatchedStore>(std::move(store), *this, members_);
}

bool CommMembership::member_failed(const std::vector<int>& members) const {
  core::LockGuard lock(mutex_);
  for (const Loss& loss : losses_) {
    if (std::find(members.begin(), members.end(), members_[static_cast<std::size_t>(loss.rank)]) != members.end()) {
      return true;
    }
  }
  return false;
}

std::string CommMembership::failures(std::vector<int>* ranks) const {
  core::LockGuard lock(mutex_);
  std::string out;
  for (const Loss& loss : losses_) {
    out += (out.empty() ? "" : "; ") + std::string("rank ") + std::to_string(loss.rank) + " (" + loss.why + ")";
    if (ranks != nullptr) ranks->push_back(loss.rank);
  }
  return out;
}

CommMembership::Next CommMembership::agree(std::uint32_t epoch, Clock::time_point deadline, int my_rank) {
  const membership::Verdict verdict = shared_->agree(epoch, deadline);
  Next next;
  next.epoch = epoch;
  for (int m : verdict.failed.members()) {
    const int rank = rank_of_[static_cast<std::size_t>(m)];
    if (rank >= 0) next.failed.push_back(rank);
  }
  const ErrorContext context{.op = "shrink",
                             .rank = my_rank,
                             .hint = "this rank cannot go on with the others: end it (the survivors go on without it)",
                             .failed_ranks = next.failed};
  switch (verdict.outcome) {
    case membership::Verdict::Outcome::Go: break;
    case membership::Verdict::Outcome::Excluded: throw Error(ErrorCode::PeerFailure, "shrink: " + verdict.why, context);
    case membership::Verdict::Outcome::Minority:
    case membership::Verdict::Outcome::TieLost:
    case membership::Verdict::Outcome::TieUnresolved:
      throw Error(ErrorCode::InvalidState, "shrink: " + verdict.why, context);
  }
  for (int m : verdict.survivors) {
    const int rank = rank_of_[static_cast<std::size_t>(m)];
    if (rank < 0) continue;  // failed before this communicator was made
    if (m == shared_->rank()) next.rank = static_cast<int>(next.members.size());
    next.members.push_back(m);
    next.survivors.push_back(rank);
  }
  next.tag = root_tag_ + "/shrink" + std::to_string(epoch);
  return next;
}

std::unique_ptr<CommMembership> CommMembership::successor(const Next& next) const {
  return std::make_unique<CommMembership>(shared_, root_tag_, next.members, next.epoch);
}

}  // namespace rdmx::coll
