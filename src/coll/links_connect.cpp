// SPDX-License-Identifier: MIT
// What a shrunk communicator keeps of the revoked one's links: the QPs to
// survivors that still work move to the new Links with the protection
// domain and CQs they were made with; the other pairs connect on first use
// (links_lazy.cpp).
//
// A kept QP must carry nothing of the old communicator once the new one
// uses it: the old region it would land in is deregistered when the old
// communicator is destroyed, and a WRITE into deregistered memory fails the
// QP (as on InfiniBand). So each rank lets its own WRITEs and READs to the
// survivors complete before it says which QPs it kept, and a pair is kept
// only when both ranks say so; until then every rank's old region stays.
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "coll/cost_model.hpp"
#include "coll/links.hpp"
#include "coll/links_layout.hpp"
#include "services/log.hpp"

namespace rdmx::coll {
using namespace wire;

std::unique_ptr<Links::Handover> Links::hand_over(const std::vector<int>& survivors, core::Clock::time_point deadline) {
  // The agreement may name a rank this one's detector has not seen fail
  // yet: revoked now, an operation still running ends at once.
  std::vector<char> skip(static_cast<std::size_t>(size_), 1);
  for (int p : survivors) skip[static_cast<std::size_t>(p)] = 0;
  for (int p = 0; p < size_; ++p) {
    if (skip[static_cast<std::size_t>(p)]) revoke("rank " + std::to_string(p) + " failed (the survivors agree)", p);
  }
  skip[static_cast<std::size_t>(rank_)] = 1;
  Driving driving(*this);  // the old communicator's running operation ends first
  try {
    drain(deadline, &skip);
  } catch (const Error& e) {
    RDMX_INFO("rank %d: handing over its connections: %s", rank_, e.what());
  }
  // A READ of a survivor's progress reads its old region, which goes with it.
  core::wait_until(
      [&] {
        poll_send_cq();
        for (int p = 0; p < size_; ++p) {
          if (!skip[static_cast<std::size_t>(p)] && live(p) && peers_[static_cast<std::size_t>(p)].reading) {
            return false;
          }
        }
        return true;
      },
      nullptr, deadline, {.progress = [this] { device_->progress(); }});
  auto out = std::make_unique<Handover>();
  out->pd = pd_;
  out->send_cq = send_cq_;
  out->recv_cq = recv_cq_;
  out->generation = static_cast<std::uint16_t>(generation_ + 1);
  out->qps.resize(static_cast<std::size_t>(size_));
  // Kept rather than deregistered: deregistering a buffer that a failed
  // peer on this host was copying into waits RDMX_TIMEOUT for that copy
  // (driver/shared_region.hpp), which the recovery need not.
  out->user_mrs = std::move(user_mrs_);
  user_mrs_ = std::make_unique<RegistrationCache>(*pd_, device_->caps());
  std::string kept;
  for (int p = 0; p < size_; ++p) {
    Peer& peer = peers_[static_cast<std::size_t>(p)];
    if (!skip[static_cast<std::size_t>(p)] && live(p) && peer.failure.empty() && peer.signaled_out == 0 &&
        !peer.reading) {
      out->qps[static_cast<std::size_t>(p)] = std::move(peer.qp);
      kept += (kept.empty() ? "" : ",") + std::to_string(p);
    }
  }
  // The rest go now: these Links post nothing more, so nothing of theirs
  // completes into the CQ the successor polls.
  for (Peer& peer : peers_) peer.qp.reset();
  said_goodbye_ = true;
  heard_every_goodbye_ = false;  // the failed ranks never said goodbye: the store keys stay
  RDMX_INFO("rank %d: hands its working connections to ranks {%s} to the shrunk communicator", rank_, kept.c_str());
  return out;
}

void Links::adopt_kept(Handover* from) {
  // "<tag>/kept/<rank>": per rank of this communicator, '1' where this rank
  // has a working QP to keep. Only the peers this rank kept a QP to read it.
  auto lent = [&](int p) -> std::unique_ptr<QueuePair>& {
    return from->qps[static_cast<std::size_t>(from->survivors[static_cast<std::size_t>(p)])];
  };
  std::string mine(static_cast<std::size_t>(size_), '0');
  for (int p = 0; p < size_; ++p) {
    if (p != rank_ && lent(p) && lent(p)->state() == QpState::Rts) mine[static_cast<std::size_t>(p)] = '1';
  }
  const std::string my_key = tag_ + "/kept/" + std::to_string(rank_);
  store_->set(my_key, std::string_view(mine));
  published_keys_.push_back(my_key);
  std::vector<int> reused;
  for (int p = 0; p < size_; ++p) {
    if (mine[static_cast<std::size_t>(p)] != '1') continue;
    std::string theirs;
    try {
      theirs = store_->get_string(tag_ + "/kept/" + std::to_string(p));
    } catch (const Error& e) {
      throw Error(
          e.code(),
          "shrunk communicator create: no list of kept connections from rank " + std::to_string(p) + ": " + e.message(),
          {.op = "communicator create",
           .rank = rank_,
           .peer_rank = p,
           .hint = "that survivor did not reach the shrunk communicator's creation (died or hung)"});
    }
    if (theirs.size() != static_cast<std::size_t>(size_)) {
      throw Error(ErrorCode::Protocol,
                  "shrunk communicator create: rank " + std::to_string(p) + " lists kept connections '" + theirs +
                      "' for " + std::to_string(theirs.size()) + " ranks, not " + std::to_string(size_),
                  {.op = "communicator create",
                   .rank = rank_,
                   .peer_rank = p,
                   .hint = "every survivor must run the same rdmx version and agree on the survivors"});
    }
    if (theirs[static_cast<std::size_t>(rank_)] == '1') {
      reused.push_back(p);
    } else {
      lent(p).reset();  // the peer did not keep its end
    }
  }
  // Taken one by one: a failure later gives back what was not used (give_back()).
  for (int p : reused) {
    attach_peer(p, std::move(lent(p)));
    lent_peers_.push_back(p);
  }
  kept_connections_ = static_cast<int>(reused.size());
  RDMX_INFO("communicator %s: rank %d kept %d connections", tag_.c_str(), rank_, kept_connections_);
}

// A communicator that was not made after all gives the QPs it took back, if
// it posted nothing on them: no WRITE of it can then land in a region freed
// with it. The next attempt's lists of kept connections sort out the rest.
void Links::give_back() noexcept {
  if (lent_from_ == nullptr) return;
  Handover* from = lent_from_;
  lent_from_ = nullptr;
  for (int p : lent_peers_) {
    Peer& peer = peers_[static_cast<std::size_t>(p)];
    if (!peer.qp || peer.posted) continue;
    const int old = from->survivors[static_cast<std::size_t>(p)];
    if (!from->qps[static_cast<std::size_t>(old)]) from->qps[static_cast<std::size_t>(old)] = std::move(peer.qp);
  }
}

}  // namespace rdmx::coll
