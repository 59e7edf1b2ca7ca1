// SPDX-License-Identifier: MIT
// The watch over a run that waits: it reads every peer's Progress (one RDMA
// READ each, served without the peer's help) while the run is stalled, so
// that ranks which called different collectives, or different algorithms
// or roots of one (and so wait for messages that never come), are told so
// within a fraction of a second rather than at RDMX_TIMEOUT; a READ that
// fails is a dead peer; and a timeout names the ranks that are missing:
// those that have not called the collective, those that stopped making
// progress inside it, and those that do not answer at all. A rank still
// waiting in an earlier collective, its beat moving, is blocked like this
// one and is not missing.
#include <sched.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "coll/links.hpp"
#include "coll/links_layout.hpp"
#include "services/log.hpp"
#include "services/race_annotations.hpp"

namespace rdmx::coll {
using namespace wire;

namespace {

// A run that has waited this long starts reading its peers' progress, then
// reads again at this period; a suspected mismatch is read once more at once.
constexpr auto kFirstLook = std::chrono::milliseconds(200);
constexpr auto kLookEvery = std::chrono::milliseconds(250);
// A waiting rank advances its beat this often; one whose beat stands still
// for kStill is not waiting in rdmx (stopped, hung or busy elsewhere).
constexpr auto kBeatEvery = std::chrono::milliseconds(100);
constexpr auto kStill = std::chrono::milliseconds(1000);
// The last READs before a timeout report: bounded, so that a stopped peer
// adds little to RDMX_TIMEOUT.
constexpr auto kLastLook = std::chrono::milliseconds(300);

// Does a peer that is in collective desc.seq run the same call?
bool same_call(const Progress& p, const OpDesc& d) {
  return p.op == static_cast<std::uint8_t>(d.op) && p.type == static_cast<std::uint8_t>(d.type) && p.count == d.count &&
         p.root == d.root && p.algo == static_cast<std::uint8_t>(d.algo) &&
         (p.redop == static_cast<std::uint8_t>(d.redop) || !needs_redop(d.op));
}

bool same_fields(const Progress& a, const Progress& b) {
  return a.entered == b.entered && a.op == b.op && a.type == b.type && a.count == b.count && a.root == b.root &&
         a.algo == b.algo && a.redop == b.redop;
}

std::string seconds(core::Clock::duration d) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", std::chrono::duration<double>(d).count());
  return text;
}

std::string ranks_word(const std::vector<int>& ranks) {
  return (ranks.size() > 1 ? "ranks " : "rank ") + rank_list(ranks);
}

}  // namespace

void Links::enter(const OpDesc& desc) noexcept {
  // The user may have freed a buffer since the last operation and got new
  // memory at its address: pinning registrations of memory the cache
  // cannot watch for unmapping are not kept.
  user_mrs_->forget_unwatched();
  if (desc.p2p()) return;
  Progress& p = control_->progress;
  const core::RacingPlacementScope racing;  // peers READ the block meanwhile
  auto store = [](auto& field, auto value) { std::atomic_ref(field).store(value, std::memory_order_release); };
  store(p.entered_again, std::uint64_t{0});
  store(p.count, desc.count);
  store(p.root, desc.root);
  store(p.op, static_cast<std::uint8_t>(desc.op));
  store(p.type, static_cast<std::uint8_t>(desc.type));
  store(p.redop, static_cast<std::uint8_t>(desc.redop));
  store(p.algo, static_cast<std::uint8_t>(desc.algo));
  store(p.entered, desc.seq);
  store(p.entered_again, desc.seq);
}

void Links::leave(const OpDesc& desc) noexcept {
  if (desc.p2p()) return;
  const core::RacingPlacementScope racing;
  std::atomic_ref<std::uint64_t>(control_->progress.left).store(desc.seq, std::memory_order_release);
}

void Links::start_watch() noexcept {
  watch_started_ = {};
  stall_reported_ = false;
}

void Links::beat(core::Clock::time_point now) noexcept {
  if (now < next_beat_) return;
  const core::RacingPlacementScope racing;
  auto word = std::atomic_ref<std::uint64_t>(control_->progress.beat);
  word.store(word.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  next_beat_ = now + kBeatEvery;
}

void Links::watch_peers(const OpDesc& desc) {
  const auto now = core::Clock::now();
  if (watch_started_ == core::Clock::time_point{}) {
    watch_started_ = now;
    next_look_ = now + kFirstLook;
  }
  beat(now);
  if (reads_outstanding_ != 0) {
    poll_send_cq();
    look_at_copies(desc, now);
  }
  if (now >= next_look_) {
    read_progress();
    // A rank waiting here may be the peer another one needs to connect to.
    answer_dials();
    next_look_ = now + kLookEvery;
  }
  if (!stall_reported_ && stall_warn_.count() > 0 && !desc.p2p() && now - watch_started_ >= stall_warn_) {
    stall_reported_ = true;
    report_stall(desc, now);
  }
}

void Links::read_progress() {
  for (int p = 0; p < size_; ++p) {
    Peer& peer = peers_[static_cast<std::size_t>(p)];
    if (p == rank_ || peer.reading || !live(p)) continue;
    Sge sge{reinterpret_cast<std::uint64_t>(base_ + layout_->diag + static_cast<std::size_t>(p) * kLine),
            sizeof(Progress), region_->lkey()};
    SendWr wr;
    wr.opcode = Opcode::RdmaRead;
    wr.sg_list = {&sge, 1};
    wr.remote_addr = peer.remote_base + offsetof(Control, progress);
    wr.rkey = peer.rkey;
    wr.wr_id = make_wr_id(kDiag, p, generation_);
    try {
      post(p, wr);
      peer.reading = true;
      ++reads_outstanding_;
    } catch (const Error& e) {
      // The QP is failing: the run's failure check reports it.
      RDMX_TRACE("rank %d: reading rank %d's progress: %s", rank_, p, e.what());
    }
  }
}

void Links::look_at_copies(const OpDesc& desc, core::Clock::time_point now) {
  for (int p = 0; p < size_; ++p) {
    Peer& peer = peers_[static_cast<std::size_t>(p)];
    if (!peer.fresh) continue;
    peer.fresh = false;
    peer.answered = now;
    Progress copy;
    std::memcpy(&copy, base_ + layout_->diag + static_cast<std::size_t>(p) * kLine, sizeof(copy));
    if (copy.entered != copy.entered_again) continue;  // copied mid-update
    if (!peer.seen_valid || copy.beat != peer.seen.beat) {
      peer.beat_moved = now;
      peer.beat_seen_moving = peer.seen_valid;
    }
    const bool suspect = !desc.p2p() && copy.entered == desc.seq && !same_call(copy, desc);
    // A mismatch is reported only when a second copy shows the same call:
    // one READ may interleave with the peer's update in ways no check sees.
    if (suspect && peer.suspect && same_fields(copy, peer.seen)) report_mismatch(desc, {p});
    peer.suspect = suspect;
    peer.seen = copy;
    peer.seen_valid = true;
    if (suspect) next_look_ = now;
  }
}

void Links::report_mismatch(const OpDesc& desc, const std::vector<int>& peers) {
  std::string text = "mismatched calls: rank " + std::to_string(rank_) + " called " + describe(desc);
  for (int p : peers) {
    const Progress& seen = peers_[static_cast<std::size_t>(p)].seen;
    text += " but rank " + std::to_string(p) + " called " + describe(wire::described_call(seen, seen.entered));
  }
  notify_peers(ErrorCode::Protocol, text, desc.seq);
  mark_aborted(text);
  throw Error(ErrorCode::Protocol, text,
              {.op = describe(desc),
               .rank = rank_,
               .peer_rank = peers.size() == 1 ? peers[0] : -1,
               .hint = "every rank must call the same collectives in the same order with the same type, count, "
                       "operation and root (and the same RDMX_ALGO and RDMX_COLL_* settings)"});
}

bool Links::unresponsive(int p, core::Clock::time_point now) const {
  const Peer& peer = peers_[static_cast<std::size_t>(p)];
  if (!peer.failure.empty()) return true;
  {
    // Counted failed by the membership (the revocation): dead or silent.
    core::LockGuard lock(abort_mutex_);
    if (std::find(failed_ranks_.begin(), failed_ranks_.end(), p) != failed_ranks_.end()) return true;
  }
  const bool silent = peer.reading && now - std::max(peer.answered, watch_started_) > kStill;
  const bool still = peer.seen_valid && peer.seen.left < peer.seen.entered && now - peer.beat_moved > kStill;
  return silent || still;
}

// What the peers were doing when `desc` timed out, from a last bounded round
// of READs and what the watch saw before; throws the mismatch error instead
// when a peer is in the same collective with other arguments.
// `missing_ranks` gets the ranks it names as missing.
std::string Links::progress_report(const OpDesc& desc, std::vector<int>* missing_ranks) {
  if (desc.p2p()) return "";
  if (watch_started_ == core::Clock::time_point{}) watch_started_ = core::Clock::now();
  read_progress();
  const auto until = core::Clock::now() + kLastLook;
  core::wait_until(
      [&] {
        poll_send_cq();
        for (int p = 0; p < size_; ++p) {
          if (peers_[static_cast<std::size_t>(p)].reading && live(p)) return false;
        }
        return true;
      },
      nullptr, until, {.progress = [this] { device_->progress(); }});
  const auto now = core::Clock::now();
  for (auto& peer : peers_) peer.suspect = peer.suspect && peer.fresh;  // a fresh copy that agrees decides
  look_at_copies(desc, now);
  std::vector<int> mismatched;
  for (int p = 0; p < size_; ++p) {
    if (p != rank_ && peers_[static_cast<std::size_t>(p)].suspect) mismatched.push_back(p);
  }
  if (!mismatched.empty()) report_mismatch(desc, mismatched);
  return missing_report(desc, now, missing_ranks);
}

// From what the watch saw: who has not called `desc`, who is stuck in it,
// who does not answer, and who is not missing.
std::string Links::missing_report(const OpDesc& desc, core::Clock::time_point now, std::vector<int>* missing_ranks) {
  std::vector<int> absent, stuck, silent, waiting, behind, finished;
  std::uint64_t last_absent = 0, last_behind = 0;
  core::Clock::duration longest_still{}, longest_silent{};
  int unconnected = 0;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    const Peer& peer = peers_[static_cast<std::size_t>(p)];
    if (!peer.qp) {
      ++unconnected;  // no pair with it yet, nothing of it to read
      continue;
    }
    if (!peer.failure.empty() || !live(p) || (peer.reading && now - std::max(peer.answered, watch_started_) > kStill) ||
        !peer.seen_valid) {
      silent.push_back(p);
      longest_silent = std::max(longest_silent, now - std::max(peer.answered, watch_started_));
    } else if (peer.seen.entered < desc.seq && peer.seen.left < peer.seen.entered && peer.beat_seen_moving &&
               now - peer.beat_moved <= kStill) {
      // Inside an earlier collective and waiting there (its beat moves): it
      // is blocked on another rank, and calls this one once that one comes.
      behind.push_back(p);
      last_behind = std::max(last_behind, peer.seen.entered);
    } else if (peer.seen.entered < desc.seq) {
      absent.push_back(p);
      last_absent = std::max(last_absent, peer.seen.entered);
    } else if (peer.seen.left < desc.seq) {
      if (now - peer.beat_moved > kStill && now - watch_started_ > kStill) {
        stuck.push_back(p);
        longest_still = std::max(longest_still, now - peer.beat_moved);
      } else {
        waiting.push_back(p);
      }
    } else {
      finished.push_back(p);
    }
  }
  std::string missing;
  auto add = [](std::string& out, const std::string& s) { out += (out.empty() ? "" : "; ") + s; };
  if (!absent.empty()) {
    add(missing, ranks_word(absent) + (absent.size() > 1 ? " have" : " has") +
                     " not called it (the latest collective they entered is #" + std::to_string(last_absent) + ")");
  }
  if (!stuck.empty()) {
    add(missing, ranks_word(stuck) + (stuck.size() > 1 ? " are" : " is") + " in it but made no progress for " +
                     seconds(longest_still) + " (the process is stopped, hung, or busy outside rdmx)");
  }
  if (!silent.empty()) {
    add(missing, "no answer from " + ranks_word(silent) + " for " + seconds(longest_silent) +
                     " (stopped, hung, dead, or unreachable)");
  }
  std::string others;
  if (!waiting.empty())
    add(others, ranks_word(waiting) + (waiting.size() > 1 ? " are" : " is") + " in it, waiting too");
  if (!behind.empty()) {
    add(others, ranks_word(behind) + (behind.size() > 1 ? " are" : " is") + " still in an earlier collective (#" +
                    std::to_string(last_behind) + "), waiting on a missing rank");
  }
  if (!finished.empty()) add(others, "finished: " + ranks_word(finished));
  if (unconnected != 0) {
    add(others, std::to_string(unconnected) + " ranks not connected to this one, not watched from here (rdmx " +
                    "status shows every rank)");
  }
  if (missing_ranks != nullptr) {
    // Whose status to read: not the silent ones (dead, stopped or cut off),
    // whose part is said above and whose store is often out of reach too,
    // where reading would only make the error late.
    for (const auto* list : {&absent, &stuck}) missing_ranks->insert(missing_ranks->end(), list->begin(), list->end());
    std::sort(missing_ranks->begin(), missing_ranks->end());
  }
  if (missing.empty()) return "No rank is missing" + (others.empty() ? std::string() : ": " + others);
  return "Missing: " + missing + (others.empty() ? std::string() : ". Not missing: " + others);
}

// What the missing ranks published of themselves (rank_status.hpp): their
// last collectives and where their programs are. The first few only.
std::string Links::missing_ranks_status(std::vector<int> ranks) const {
  constexpr std::size_t kNamed = 8;
  if (!status_reader_ || ranks.empty()) return "";
  const std::size_t more = ranks.size() > kNamed ? ranks.size() - kNamed : 0;
  ranks.resize(std::min(ranks.size(), kNamed));
  std::string text = status_reader_(ranks);
  if (more != 0) text += "\n(and " + std::to_string(more) + " more ranks)";
  return text;
}

void Links::report_stall(const OpDesc& desc, core::Clock::time_point now) {
  std::vector<int> missing;
  const std::string report = missing_report(desc, now, &missing);
  const std::string status = missing_ranks_status(missing);
  RDMX_WARN("%s has waited %s on rank %d (RDMX_STALL_WARN; it fails at RDMX_TIMEOUT, %lld ms). %s%s%s",
            describe(desc).c_str(), seconds(now - watch_started_).c_str(), rank_,
            static_cast<long long>(timeout_.count()), report.c_str(), status.empty() ? "" : "\n", status.c_str());
}

void Links::fail_timeout(const OpDesc& desc, const std::string& waiting_for) {
  std::vector<int> missing;
  const std::string report = progress_report(desc, &missing);
  const std::string status = missing_ranks_status(missing);
  const std::string text = describe(desc) + " timed out after " + std::to_string(timeout_.count()) + " ms on rank " +
                           std::to_string(rank_) + ", " + waiting_for + (report.empty() ? "" : ". " + report) +
                           (status.empty() ? "" : "\n" + status);
  // The peers still waiting learn which ranks this one found missing.
  notify_peers(ErrorCode::Timeout, text, desc.p2p() ? 0 : desc.seq);
  mark_aborted(describe(desc) + " timed out");
  throw Error(ErrorCode::Timeout, text,
              {.op = describe(desc),
               .rank = rank_,
               .hint = "every rank must call the same collectives in the same order; a rank listed as not having "
                       "called it is stuck elsewhere or dead. RDMX_TIMEOUT sets the bound"});
}

}  // namespace rdmx::coll
