// SPDX-License-Identifier: MIT
// How a communicator's Links connect: a QP to every peer (a new mesh, or
// what a shrink kept), then each rank's region address through the store.
//
// What a shrunk communicator keeps of the revoked one's links: the QPs to
// survivors that still work move to the new Links with the protection
// domain and CQs they were made with, and only the broken pairs are
// connected anew through the store.
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

namespace {
// Message flags carry the number xor a per-pair value, so that payload bytes
// left in a slot cannot pass for a flag: both sides derive it from the
// receiver's region address and the sender's rank.
std::uint64_t pair_salt(std::uint64_t receiver_base, int sender) {
  std::uint64_t x = receiver_base ^ (static_cast<std::uint64_t>(sender) + 1) * 0x9e3779b97f4a7c15ULL;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x | 1;
}
}  // namespace

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

Mesh Links::connect_peers(Store& store, const std::string& tag, Handover* from) {
  const std::string qp_tag = tag + "/qp";
  if (from == nullptr) return connect_mesh(store, rank_, size_, *device_, *pd_, *send_cq_, *recv_cq_, QpCaps{}, qp_tag);
  // "<tag>/kept/<rank>": per rank of this communicator, '1' where this rank
  // has a working QP to keep.
  auto lent = [&](int p) -> std::unique_ptr<QueuePair>& {
    return from->qps[static_cast<std::size_t>(from->survivors[static_cast<std::size_t>(p)])];
  };
  std::string mine(static_cast<std::size_t>(size_), '0');
  for (int p = 0; p < size_; ++p) {
    if (p != rank_ && lent(p) && lent(p)->state() == QpState::Rts) mine[static_cast<std::size_t>(p)] = '1';
  }
  const std::string my_key = tag + "/kept/" + std::to_string(rank_);
  store.set(my_key, std::string_view(mine));
  std::vector<int> fresh, reused;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    std::string theirs;
    try {
      theirs = store.get_string(tag + "/kept/" + std::to_string(p));
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
    const bool both = mine[static_cast<std::size_t>(p)] == '1' && theirs[static_cast<std::size_t>(rank_)] == '1';
    (both ? reused : fresh).push_back(p);
  }
  // Nothing is taken from `from` until every new connection is made: a
  // failure here leaves it whole for the next attempt.
  Mesh mesh = connect_mesh(store, rank_, size_, fresh, *device_, *pd_, *send_cq_, *recv_cq_, QpCaps{}, qp_tag);
  for (int p : reused) mesh.qps[static_cast<std::size_t>(p)] = std::move(lent(p));
  lent_peers_ = reused;
  for (int p : fresh) lent(p).reset();  // the peer did not keep its end
  kept_connections_ = static_cast<int>(reused.size());
  mesh.keys.push_back(my_key);
  RDMX_INFO("communicator %s: rank %d kept %d of its %d connections, made %zu anew", tag.c_str(), rank_,
            kept_connections_, size_ - 1, fresh.size());
  return mesh;
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

void Links::exchange_regions(Store& store, const std::string& tag, Mesh& mesh) {
  const int rank = rank_, size = size_;
  const LinksConfig& config = config_;
  published_keys_ = std::move(mesh.keys);
  for (int p = 0; p < size; ++p) {
    Peer& peer = peers_[static_cast<std::size_t>(p)];
    peer.qp = std::move(mesh.qps[static_cast<std::size_t>(p)]);
    if (!peer.qp) continue;
    const DeviceCaps caps = peer.qp->device_caps();
    peer.direct_writes = caps.direct_registered_writes;
    network_ = network_ || caps.remote_peers;
    const bool same_host = config.host_of.empty() || config.host_of[static_cast<std::size_t>(p)] ==
                                                         config.host_of[static_cast<std::size_t>(rank)];
    take_least_favourable(same_host ? figures_.in_host : figures_.between_hosts,
                          {caps.latency_us, caps.bandwidth_gbps});
  }

  // Exchange where each region is, and whether the rank reaches a peer over
  // a network link: "<tag>/region/<rank>" = base:rkey:length:network.
  std::ostringstream mine;
  mine << reinterpret_cast<std::uintptr_t>(base_) << ':' << region_->rkey() << ':' << layout_->total << ':'
       << (network_ ? 1 : 0) << ':' << figures_.in_host.latency_us << ':' << figures_.in_host.bandwidth_gbps << ':'
       << figures_.between_hosts.latency_us << ':' << figures_.between_hosts.bandwidth_gbps;
  published_keys_.push_back(tag + "/region/" + std::to_string(rank));
  store.set(published_keys_.back(), std::string_view(mine.str()));
  LinkFigures agreed;
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    const std::string key = tag + "/region/" + std::to_string(p);
    std::string text;
    try {
      text = store.get_string(key);
    } catch (const Error& e) {
      throw Error(e.code(),
                  "communicator create: no buffer address from rank " + std::to_string(p) + ": " + e.message(),
                  {.op = "communicator create",
                   .rank = rank,
                   .peer_rank = p,
                   .hint = "that rank did not reach communicator creation (crashed, hung, or another tag/store)"});
    }
    unsigned long long base = 0, length = 0;
    unsigned rkey = 0;
    int network = 0;
    LinkFigures theirs;
    if (std::sscanf(text.c_str(), "%llu:%u:%llu:%d:%lf:%lf:%lf:%lf", &base, &rkey, &length, &network,
                    &theirs.in_host.latency_us, &theirs.in_host.bandwidth_gbps, &theirs.between_hosts.latency_us,
                    &theirs.between_hosts.bandwidth_gbps) != 8 ||
        length != layout_->total) {
      throw Error(ErrorCode::Protocol,
                  "communicator create: rank " + std::to_string(p) + " published buffers '" + text +
                      "' that do not match this rank's layout (" + std::to_string(layout_->total) + " bytes)",
                  {.op = "communicator create",
                   .rank = rank,
                   .peer_rank = p,
                   .hint = "every rank must use the same RDMX_COLL_BUFFSIZE and RDMX_COLL_SLOTS and rdmx version"});
    }
    Peer& peer = peers_[static_cast<std::size_t>(p)];
    peer.remote_base = base;
    peer.rkey = rkey;
    peer.salt = pair_salt(base, rank);
    any_network_ = any_network_ || network != 0;
    take_least_favourable(agreed.in_host, theirs.in_host);
    take_least_favourable(agreed.between_hosts, theirs.between_hosts);
  }
  take_least_favourable(agreed.in_host, figures_.in_host);
  take_least_favourable(agreed.between_hosts, figures_.between_hosts);
  figures_ = agreed;
  any_network_ = any_network_ || network_;
  salts_from_.resize(static_cast<std::size_t>(size));
  for (int p = 0; p < size; ++p)
    salts_from_[static_cast<std::size_t>(p)] = pair_salt(reinterpret_cast<std::uintptr_t>(base_), p);
  ordered_ = device_->caps().ordered_write_placement;
  RDMX_INFO("communicator %s: rank %d of %d, %zu x %zu B buffers per peer, %zu bytes registered", tag.c_str(), rank,
            size, static_cast<std::size_t>(config_.slots), config_.chunk, layout_->total);
}

}  // namespace rdmx::coll
