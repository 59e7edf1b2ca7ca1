// SPDX-License-Identifier: MIT
// Connections made on first use. A communicator connects its ring
// neighbours when it is made (they carry most algorithms, and their links
// tell the cost model what links cost); every other pair connects in the
// first run() whose schedule uses it, through the store:
//   "<tag>/region/<r>"   rank r's region: base:rkey:length (set once)
//   "<tag>/qp/<r>/<p>"   rank r's QP address for peer p (connect_mesh's keys)
//   "<tag>/dial/<p>"     how many ranks asked p to connect, and
//   "<tag>/dial/<p>/<i>" the i-th of them (p removes it once read).
// Both ends of a collective's pair run the same schedule, so both publish
// and both wait. A point-to-point send may reach a rank that waits on
// someone else: after kDialAfter without the peer's address a rank dials
// it, and a rank that waits (here, or in a stalled run: links_watch.cpp)
// answers the dials it finds, so no cycle of such waits deadlocks.
//
// The link figures every rank must agree on (the cost model's input) are
// gathered once through the store (store_gather.hpp): each rank takes the
// least favourable of what every ring link declares.
#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "coll/comm_memory.hpp"
#include "coll/cost_model.hpp"
#include "coll/links.hpp"
#include "coll/links_layout.hpp"
#include "services/log.hpp"

namespace rdmx::coll {
using namespace wire;

namespace lazy_links {

// A pair that has not found the other's address this long asks it to connect.
constexpr auto kDialAfter = std::chrono::milliseconds(100);
// How long one wait on the store for the pending addresses lasts before the
// loop drives the device and reads its own dials again: short at first, then
// an eighth of the time waited so far, so that hundreds of ranks waiting on
// late peers do not keep the store server (one thread among their processes)
// from answering.
constexpr auto kFirstWaitSlice = std::chrono::milliseconds(10);
constexpr auto kLongestWaitSlice = std::chrono::milliseconds(200);

std::chrono::milliseconds wait_slice(core::Clock::duration waited) {
  return std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(waited / 8), kFirstWaitSlice,
                    kLongestWaitSlice);
}

std::string qp_key(const std::string& tag, int from, int to) {
  return tag + "/qp/" + std::to_string(from) + "/" + std::to_string(to);
}

std::string dial_key(const std::string& tag, int rank) { return tag + "/dial/" + std::to_string(rank); }

}  // namespace lazy_links
using namespace lazy_links;

int Links::connected_peers() const noexcept {
  int n = 0;
  for (int p = 0; p < size_; ++p) n += peers_[static_cast<std::size_t>(p)].qp ? 1 : 0;
  return n;
}

void Links::publish_region() {
  std::ostringstream mine;
  mine << reinterpret_cast<std::uintptr_t>(base_) << ':' << region_->rkey() << ':' << layout_->total;
  published_keys_.push_back(tag_ + "/region/" + std::to_string(rank_));
  store_->set(published_keys_.back(), std::string_view(mine.str()));
  // Others create it when they dial this rank; this rank removes it.
  published_keys_.push_back(dial_key(tag_, rank_));
}

void Links::attach_peer(int p, std::unique_ptr<QueuePair>&& qp) {
  const std::string key = tag_ + "/region/" + std::to_string(p);
  std::string text;
  try {
    text = store_->get_string(key);
  } catch (const Error& e) {
    throw Error(e.code(), "connecting to rank " + std::to_string(p) + ": no buffer address from it: " + e.message(),
                {.op = "connect",
                 .rank = rank_,
                 .peer_rank = p,
                 .hint = "that rank did not reach communicator creation (crashed, hung, or another tag/store)"});
  }
  unsigned long long base = 0, length = 0;
  unsigned rkey = 0;
  if (std::sscanf(text.c_str(), "%llu:%u:%llu", &base, &rkey, &length) != 3 || length != layout_->total) {
    throw Error(ErrorCode::Protocol,
                "connecting to rank " + std::to_string(p) + ": it published buffers '" + text +
                    "' that do not match this rank's layout (" + std::to_string(layout_->total) + " bytes)",
                {.op = "connect",
                 .rank = rank_,
                 .peer_rank = p,
                 .hint = "every rank must use the same RDMX_COLL_BUFFSIZE and RDMX_COLL_SLOTS and rdmx version"});
  }
  make_pair_resident(p);
  Peer& peer = peers_[static_cast<std::size_t>(p)];
  peer.remote_base = base;
  peer.rkey = rkey;
  peer.salt = pair_salt(base, rank_);
  peer.direct_writes = qp->device_caps().direct_registered_writes;
  peer.qp = std::move(qp);
}

void Links::make_pair_resident(int p) noexcept {
  const auto i = static_cast<std::size_t>(p);
  for (std::size_t array : {layout_->credit, layout_->consumed, layout_->diag, layout_->goodbye})
    make_resident(base_ + array + i * kLine, kLine);
  make_resident(base_ + layout_->notices + i * sizeof(Notice), sizeof(Notice));
  if (p == rank_) return;
  const std::size_t flags = layout_->slots * kLine;
  make_resident(base_ + layout_->inbox_flag(p, 0), flags);
  make_resident(base_ + layout_->staging_flag(p, 0), flags);
}

void Links::connect(const std::vector<int>& wanted, core::Clock::time_point deadline) {
  struct Pending {
    int peer;
    std::unique_ptr<QueuePair> qp;
    bool dialed = false;
  };
  std::vector<Pending> pending;
  auto open = [&](int p) {
    if (p == rank_ || peers_[static_cast<std::size_t>(p)].qp) return;
    for (const Pending& q : pending) {
      if (q.peer == p) return;
    }
    std::unique_ptr<QueuePair> qp;
    try {
      qp = device_->create_qp(*pd_, *send_cq_, *recv_cq_, QpCaps{});
    } catch (const Error& e) {
      throw Error(e.code(), "cannot create the QP towards rank " + std::to_string(p) + ": " + e.message(),
                  {.op = "connect", .rank = rank_, .peer_rank = p, .hint = e.context().hint});
    }
    published_keys_.push_back(qp_key(tag_, rank_, p));
    store_->set(published_keys_.back(), std::string_view(qp->local_address().to_hex()));
    pending.push_back({p, std::move(qp)});
  };
  int more = 0;
  for (int p : wanted) more += p != rank_ && !peers_[static_cast<std::size_t>(p)].qp ? 1 : 0;
  if (more == 0) return;
  require_room_to_connect(more, connected_peers(), local_ranks_, config_, rank_, "connect");
  for (int p : wanted) open(p);
  if (pending.empty()) return;
  const auto started = core::Clock::now();
  while (!pending.empty()) {
    // The peers' own connections to this rank complete as its device
    // makes progress (the shm provider accepts them there): a rank that
    // only waited on the store would let them time out while it waits.
    device_->progress();
    // Block on the server until every address is there, a slice at a time:
    // one request per slice, then one per peer.
    std::vector<std::string> keys;
    for (const Pending& q : pending) keys.push_back(qp_key(tag_, q.peer, rank_));
    bool arrived = false;
    try {
      store_->wait(keys, std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::min(deadline, core::Clock::now() + wait_slice(core::Clock::now() - started)) -
                             core::Clock::now()) +
                             std::chrono::milliseconds(1));
      arrived = true;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout) throw;
    }
    for (std::size_t i = 0; arrived && i < pending.size(); ++i) {
      const int p = pending[i].peer;
      try {
        pending[i].qp->connect(QpAddress::from_hex(store_->get_string(keys[i])), ConnectOptions{.peer_rank = p});
      } catch (const Error& e) {
        throw Error(
            e.code(),
            "cannot connect to rank " + std::to_string(p) + " (address from key " + keys[i] + "): " + e.message(),
            {.op = "connect",
             .rank = rank_,
             .peer_rank = p,
             .peer_addr = e.context().peer_addr,
             .hint =
                 e.context().hint.empty() ? "the peer may run another provider or rdmx version" : e.context().hint});
      }
      attach_peer(p, std::move(pending[i].qp));
    }
    if (arrived) pending.clear();
    if (pending.empty()) break;
    const auto now = core::Clock::now();
    beat(now);
    if (now >= deadline) {
      std::vector<int> missing;
      for (const Pending& q : pending) missing.push_back(q.peer);
      throw Error(ErrorCode::Timeout,
                  "no connection address from " + std::string(missing.size() > 1 ? "ranks " : "rank ") +
                      rank_list(missing) + " after " +
                      std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - started).count()) +
                      " ms",
                  {.op = "connect",
                   .rank = rank_,
                   .peer_rank = missing.size() == 1 ? missing[0] : -1,
                   .hint = "a rank connects to a peer the first time an operation uses the pair; a peer that never "
                           "publishes its address did not reach that operation (stuck elsewhere, dead, or it "
                           "called another one)"});
    }
    if (now - started < kDialAfter) continue;
    for (Pending& q : pending) {
      if (q.dialed) continue;
      q.dialed = true;
      const std::int64_t index = store_->add(dial_key(tag_, q.peer), 1);
      store_->set(dial_key(tag_, q.peer) + "/" + std::to_string(index), std::string_view(std::to_string(rank_)));
    }
    for (int p : read_dials()) open(p);
  }
}

std::vector<int> Links::read_dials() {
  std::vector<int> out;
  const std::string counter = dial_key(tag_, rank_);
  const std::int64_t dials = store_->add(counter, 0);
  while (dials_read_ < dials) {
    const std::string key = counter + "/" + std::to_string(dials_read_ + 1);
    // The dialer sets the entry right after counting it.
    const std::string who = store_->get_string(key);
    store_->remove(key);
    ++dials_read_;
    const int p = std::atoi(who.c_str());
    if (p >= 0 && p < size_ && p != rank_ && !peers_[static_cast<std::size_t>(p)].qp) out.push_back(p);
  }
  return out;
}

// Dials this rank never read (the pair connected from both ends first)
// go with its other keys: every dialer has said goodbye, so it set them.
void Links::forget_dials() noexcept {
  try {
    const std::string counter = dial_key(tag_, rank_);
    const std::int64_t dials = store_->add(counter, 0);
    for (std::int64_t i = dials_read_ + 1; i <= dials; ++i)
      published_keys_.push_back(counter + "/" + std::to_string(i));
    dials_read_ = dials;
  } catch (const std::exception& e) {
    RDMX_INFO("rank %d: its dial entries stay in the store: %s", rank_, e.what());
  }
}

void Links::answer_dials() {
  try {
    const std::vector<int> dialers = read_dials();
    if (!dialers.empty()) connect(dialers, core::deadline_after(timeout_));
  } catch (const Error& e) {
    // The run that waits fails on its own terms (its peers, its timeout);
    // the dialer names this rank if the pair never connects.
    RDMX_INFO("rank %d: answering the ranks that asked to connect: %s", rank_, e.what());
  }
}

void Links::connect_schedule(const Schedule& schedule, const OpDesc& desc, std::chrono::milliseconds timeout) {
  std::vector<int> wanted;
  auto want = [&](int p) {
    if (p >= 0 && p < size_ && p != rank_ && !peers_[static_cast<std::size_t>(p)].qp) wanted.push_back(p);
  };
  for (const SendOp& s : schedule.sends) want(s.peer);
  for (const RecvOp& r : schedule.recvs) want(r.peer);
  if (wanted.empty()) return;
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  if (aborted()) fail_aborted(desc);
  try {
    connect(wanted, core::deadline_after(timeout));
  } catch (const Error& e) {
    // Revoked meanwhile (the membership found a rank dead): that is the error.
    if (aborted()) fail_aborted(desc);
    std::vector<int> named;
    if (e.context().peer_rank >= 0) named.push_back(e.context().peer_rank);
    if (named.empty()) named = wanted;
    const std::string status = missing_ranks_status(named);
    const std::string text = describe(desc) + " on rank " + std::to_string(rank_) + ": connecting to " +
                             (wanted.size() > 1 ? "ranks " : "rank ") + rank_list(wanted) + " failed: " + e.message() +
                             (status.empty() ? "" : "\n" + status);
    mark_aborted(describe(desc) + ": connecting failed");
    throw Error(e.code(), text,
                {.op = describe(desc),
                 .rank = rank_,
                 .peer_rank = e.context().peer_rank,
                 .hint = e.context().hint.empty() ? "every rank must call the same collectives in the same order"
                                                  : e.context().hint,
                 .failed_ranks = e.context().failed_ranks});
  }
}

// Per rank: network:in-host latency:bandwidth:between latency:bandwidth.
void Links::agree_on_figures() {
  auto format = [](bool network, const LinkFigures& f) {
    std::ostringstream out;
    out << (network ? 1 : 0) << ':' << f.in_host.latency_us << ':' << f.in_host.bandwidth_gbps << ':'
        << f.between_hosts.latency_us << ':' << f.between_hosts.bandwidth_gbps;
    return out.str();
  };
  auto parse = [&](const std::string& text, int from, bool& network, LinkFigures& f) {
    int n = 0;
    if (std::sscanf(text.c_str(), "%d:%lf:%lf:%lf:%lf", &n, &f.in_host.latency_us, &f.in_host.bandwidth_gbps,
                    &f.between_hosts.latency_us, &f.between_hosts.bandwidth_gbps) != 5) {
      throw Error(ErrorCode::Protocol,
                  "communicator create: rank " + std::to_string(from) + " published link figures '" + text +
                      "' this rank cannot read",
                  {.op = "communicator create",
                   .rank = rank_,
                   .peer_rank = from,
                   .hint = "every rank must run the same rdmx version"});
    }
    network = n != 0;
  };
  for (int p = 0; p < size_; ++p) {
    const Peer& peer = peers_[static_cast<std::size_t>(p)];
    if (!peer.qp) continue;  // the ring neighbours: every kind of link the job has is among them
    const DeviceCaps caps = peer.qp->device_caps();
    network_ = network_ || caps.remote_peers;
    const bool same_host = config_.host_of.empty() || config_.host_of[static_cast<std::size_t>(p)] ==
                                                          config_.host_of[static_cast<std::size_t>(rank_)];
    take_least_favourable(same_host ? figures_.in_host : figures_.between_hosts,
                          {caps.latency_us, caps.bandwidth_gbps});
  }
  const std::string mine = format(network_, figures_);
  const auto deadline = core::deadline_after(timeout_);
  const std::vector<std::string> published = config_.gather_all(tag_ + "/links", mine, "link figures", deadline);
  bool any = false;
  LinkFigures agreed = figures_;
  for (int p = 0; p < size_; ++p) {
    bool network = false;
    LinkFigures theirs;
    parse(published[static_cast<std::size_t>(p)], p, network, theirs);
    any = any || network;
    take_least_favourable(agreed.in_host, theirs.in_host);
    take_least_favourable(agreed.between_hosts, theirs.between_hosts);
  }
  any_network_ = any;
  figures_ = agreed;
}

}  // namespace rdmx::coll
