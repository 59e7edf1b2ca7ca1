// SPDX-License-Identifier: MIT
// Membership::gather(): Bruck's all-gather driven by the membership thread,
// over the control connections (made on first use when a step's partner
// is not an overlay neighbour, as in a shrunk group's numbering).
#include <algorithm>

#include "membership/membership.hpp"
#include "membership/overlay.hpp"
#include "rdmx/error.hpp"
#include "services/hash.hpp"
#include "services/little_endian.hpp"

namespace rdmx::membership {

struct Membership::Gathering {
  Gathering(std::uint64_t id_, std::vector<int> members_, int index, std::string mine)
      : id(id_), members(std::move(members_)), steps(index, static_cast<int>(members.size()), std::move(mine)) {}
  std::uint64_t id;
  std::vector<int> members;  // this Membership's ranks, by index
  BruckSteps steps;
  bool sent = false;    // this step's message is queued
  std::string failure;  // why it cannot finish
  int failed_rank = -1;
  // The failure may be told to the caller: the handlers have heard of the
  // member it names, so a caller that asks its communicator whether a
  // member failed (shrink() does, to try again) finds it has.
  bool told = false;
  bool finished = false;
};

void Membership::take_gather_frame(int p, const Frame& frame) {
  if (frame.payload.size() < 8) {
    lose(p, false, "it sent a malformed exchange step on its control connection");
    return;
  }
  const std::uint64_t id = core::get_le64(frame.payload.data());
  // A sender sends each step of an exchange once: a second copy is kept
  // out rather than let it replace the first.
  early_steps_.emplace(std::make_tuple(id, frame.round, p),
                       std::vector<std::uint8_t>(frame.payload.begin() + 8, frame.payload.end()));
}

void Membership::drive_gatherings() {
  for (const auto& g : gatherings_) {
    while (!g->finished && g->failure.empty()) {
      if (g->steps.done()) {
        g->finished = true;
        gathered_word_.notify_all();
        break;
      }
      // A member suspected failed dooms the exchange; one that closed in
      // good order may have sent all it had to (and its closing is what
      // the caller's own error caused), so only the wait for it fails.
      for (int member : g->members) {
        const Peer& peer = peers_[static_cast<std::size_t>(member)];
        if (member != rank_ && peer.lost) {
          g->failed_rank = member;
          g->failure = "rank " + std::to_string(member) + " " +
                       (reasons_[static_cast<std::size_t>(member)].empty()
                            ? std::string("failed")
                            : "failed: " + reasons_[static_cast<std::size_t>(member)]);
          gathered_word_.notify_all();
          break;
        }
      }
      if (!g->failure.empty()) break;
      const int to = g->members[static_cast<std::size_t>(g->steps.send_to())];
      const int from = g->members[static_cast<std::size_t>(g->steps.receive_from())];
      if (!g->sent) {
        std::vector<std::uint8_t> payload(8);
        core::put_le64(payload.data(), g->id);
        const std::vector<std::uint8_t> message = g->steps.message();
        payload.insert(payload.end(), message.begin(), message.end());
        queue_frame(to, FrameKind::Gather, g->steps.step(), payload);
        g->sent = true;
      }
      const auto arrived = early_steps_.find(std::make_tuple(g->id, g->steps.step(), from));
      if (arrived == early_steps_.end()) {
        if (peers_[static_cast<std::size_t>(from)].left) {
          g->failed_rank = from;
          g->failure = "rank " + std::to_string(from) + " closed its communicator before sending step " +
                       std::to_string(g->steps.step());
          g->told = true;
          gathered_word_.notify_all();
        }
        break;
      }
      const std::string problem = g->steps.take(arrived->second);
      early_steps_.erase(arrived);
      if (!problem.empty()) {
        g->failed_rank = from;
        g->failure = "rank " + std::to_string(from) + " sent a malformed step (" + problem + ")";
        g->told = true;
        gathered_word_.notify_all();
        break;
      }
      g->sent = false;
    }
  }
}

void Membership::tell_gather_failures() {
  bool any = false;
  {
    core::LockGuard lock(mutex_);
    for (const auto& g : gatherings_) {
      if (!g->failure.empty() && !g->told) any = g->told = true;
    }
  }
  if (any) gathered_word_.notify_all();
}

std::vector<std::string> Membership::gather(const std::string& key, const std::vector<int>& members,
                                            const std::string& mine, const char* what,
                                            core::Clock::time_point deadline) {
  const auto at = std::find(members.begin(), members.end(), rank_);
  if (at == members.end() || mine.size() > BruckSteps::kMaxEntryBytes) {
    throw Error(ErrorCode::InvalidArgument,
                std::string("exchange of ") + what + " under '" + key + "': " +
                    (at == members.end() ? "this rank is not among the members"
                                         : std::to_string(mine.size()) + " bytes from this rank (at most " +
                                               std::to_string(BruckSteps::kMaxEntryBytes) + ")"),
                ErrorContext{.op = "communicator create", .rank = rank_});
  }
  auto g = std::make_shared<Gathering>(core::fnv1a64(key), members, static_cast<int>(at - members.begin()), mine);
  {
    core::LockGuard lock(mutex_);
    gatherings_.push_back(g);
  }
  wake();
  const auto settled = [this, &g] {
    core::LockGuard lock(mutex_);
    return g->finished || g->told;
  };
  const core::WaitResult result = core::wait_until(settled, &gathered_word_, deadline);
  core::LockGuard lock(mutex_);
  std::erase(gatherings_, g);
  // Steps of this exchange that came after it failed are of no use.
  std::erase_if(early_steps_, [&g](const auto& entry) { return std::get<0>(entry.first) == g->id; });
  if (g->finished) return g->steps.values();
  const bool timed_out = g->failure.empty();
  const int awaited = g->members[static_cast<std::size_t>(g->steps.receive_from())];
  throw Error(timed_out ? (result == core::WaitResult::Aborted ? ErrorCode::InvalidState : ErrorCode::Timeout)
                        : ErrorCode::PeerFailure,
              std::string("exchange of ") + what + " under '" + key + "': " +
                  (timed_out ? "step " + std::to_string(g->steps.step()) + " of " + std::to_string(members.size()) +
                                   " ranks' exchange still waits for rank " + std::to_string(awaited)
                             : g->failure),
              ErrorContext{.op = "communicator create",
                           .rank = rank_,
                           .peer_rank = timed_out ? awaited : g->failed_rank,
                           .hint = "every member must create the communicator; a rank that never reaches this "
                                   "step crashed, hung, or runs another tag"});
}

}  // namespace rdmx::membership
