// SPDX-License-Identifier: MIT
// One run() of a schedule: every send and receive of every peer, pumped in
// passes until all are done, with the checks that turn a peer's failure, a
// mismatched collective or a timeout into an error naming them.
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "coll/links.hpp"
#include "coll/links_layout.hpp"
#include "coll/links_run.hpp"
#include "coll/reduce.hpp"
#include "services/config.hpp"
#include "services/log.hpp"
#include "services/race_annotations.hpp"

namespace rdmx::coll {

namespace {
// A word of an inbox slot that may still be landing, its header's or its
// trailer's (core::RacingPlacementScope says why that race is on purpose).
template <typename T>
T peek(const T& word, std::memory_order order = std::memory_order_relaxed) {
  const core::RacingPlacementScope racing;
  return std::atomic_ref<const T>(word).load(order);
}

// A region's write doorbell, each sleep on it cut to 1 ms, the longest of
// the timed slices it replaces: a waiting run's watch over its peers
// (failure checks, progress READs that find a peer in another collective)
// counts passes, and a mismatch must still be found within a second or so.
// Without the cut a pass could sleep 100 ms, and the torch backend's
// mismatch test took 14 s at 3 ranks.
class SlicedDoorbell final : public Doorbell {
 public:
  explicit SlicedDoorbell(const Doorbell* inner) noexcept : inner_(inner) {}
  const Doorbell* get() const noexcept { return inner_ != nullptr ? this : nullptr; }
  std::uint32_t epoch() const noexcept override { return inner_->epoch(); }
  void block(std::uint32_t seen, std::chrono::steady_clock::time_point deadline) const noexcept override {
    inner_->block(seen, std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(1)));
  }

 private:
  const Doorbell* inner_;
};

}  // namespace
using namespace wire;

class Links::RunState {
 public:
  RunState(Links& links, Schedule& schedule, const OpDesc& desc, const Combine& combine)
      : l_(links),
        s_(schedule),
        desc_(desc),
        combine_(combine),
        send_state_(links.run_scratch_->send_state),
        recv_state_(links.run_scratch_->recv_state),
        active_(links.run_scratch_->active),
        send_pos_(links.run_scratch_->send_pos),
        recv_pos_(links.run_scratch_->recv_pos) {
    active_.clear();
    const auto n = static_cast<std::size_t>(l_.size_);
    auto& sq = l_.send_queues_;
    auto& rq = l_.recv_queues_;
    sq.resize(n);
    rq.resize(n);
    for (auto& q : sq) q.clear();
    for (auto& q : rq) q.clear();
    send_state_.assign(s_.sends.size(), {});
    for (std::size_t i = 0; i < s_.sends.size(); ++i) {
      const SendOp& op = s_.sends[i];
      check_peer(op.peer, "send");
      send_state_[i].transfer = static_cast<std::uint32_t>(sq[static_cast<std::size_t>(op.peer)].size());
      send_state_[i].seq = desc_.p2p() ? ++l_.p2p_send_seq_[static_cast<std::size_t>(op.peer)] : desc_.seq;
      sq[static_cast<std::size_t>(op.peer)].push_back(static_cast<std::uint32_t>(i));
    }
    recv_state_.assign(s_.recvs.size(), {});
    for (std::size_t i = 0; i < s_.recvs.size(); ++i) {
      RecvOp& op = s_.recvs[i];
      op.done = 0;
      check_peer(op.peer, "recv");
      recv_state_[i].transfer = static_cast<std::uint32_t>(rq[static_cast<std::size_t>(op.peer)].size());
      recv_state_[i].seq = desc_.p2p() ? ++l_.p2p_recv_seq_[static_cast<std::size_t>(op.peer)] : desc_.seq;
      rq[static_cast<std::size_t>(op.peer)].push_back(static_cast<std::uint32_t>(i));
    }
    for (std::size_t p = 0; p < n; ++p) {
      if (!sq[p].empty() || !rq[p].empty()) active_.push_back(static_cast<int>(p));
    }
    send_pos_.assign(n, 0);
    recv_pos_.assign(n, 0);
    remaining_ = s_.sends.size() + s_.recvs.size();
  }

  bool finished() const noexcept { return remaining_ == 0; }

  // One pass over every peer; true when anything moved.
  bool step() {
    if (l_.control_->abort_flag.value.load(std::memory_order_acquire) != 0) {
      // Notices about a later collective (a peer ahead of this rank) wait
      // until this rank gets there: this one may still complete.
      ErrorCode code = ErrorCode::PeerFailure;
      std::vector<int> failed;
      std::string text = l_.collect_notices(&code, desc_.p2p() ? ~std::uint64_t{0} : desc_.seq, &failed);
      if (!text.empty()) fail_notice(code, text, failed);
    }
    if (l_.aborted()) l_.fail_aborted(desc_);
    bool moved = false;
    for (int p : active_) {
      const auto pi = static_cast<std::size_t>(p);
      moved |= pump_sends(p, l_.send_queues_[pi], send_pos_[pi]);
      moved |= pump_recvs(p, l_.recv_queues_[pi], recv_pos_[pi]);
    }
    return moved;
  }

  // Peers whose QP died while transfers with them are pending fail the run;
  // messages that landed before the peer went away are consumed first (a
  // peer that finished and destroyed its communicator is not a failure).
  void check_failures() {
    if (l_.outstanding_signaled_ != 0) l_.poll_send_cq();
    if ((++checks_ & 63) == 0) {
      check_unexpected();
      l_.watch_peers(desc_);
    }
    for (int p : active_) {
      if (!pending(p)) continue;
      Peer& peer = l_.peers_[static_cast<std::size_t>(p)];
      if (peer.failure.empty() && peer.qp->state() != QpState::Error) continue;
      const auto pi = static_cast<std::size_t>(p);
      pump_recvs(p, l_.recv_queues_[pi], recv_pos_[pi]);
      if (!pending(p)) continue;
      l_.fail_peer(desc_, p, !peer.failure.empty() ? peer.failure : peer.qp->error_reason());
    }
  }

  [[noreturn]] void fail_notice(ErrorCode code, const std::string& text, const std::vector<int>& failed) {
    // Passed on before this rank goes: a peer that sees it disconnect then
    // reads the cause too, not just "connection closed".
    l_.notify_peers(code, text, desc_.p2p() ? 0 : desc_.seq, failed.empty() ? -1 : failed[0]);
    l_.mark_aborted(text);
    throw Error(code, describe(desc_) + ": " + text,
                {.op = describe(desc_),
                 .rank = l_.rank_,
                 .peer_rank = failed.size() == 1 ? failed[0] : -1,
                 .hint = "see the reporting rank's error for the cause",
                 .failed_ranks = failed});
  }

  // A message of this very operation from a peer this rank expects nothing
  // (more) from means the ranks run different algorithms or roots: both
  // sides would otherwise wait for each other until the timeout. So does a
  // message of another length than the one expected, whose trailer the
  // receiver does not poll (the watch's READs would find it later).
  void check_unexpected() {
    const Layout& lay = *l_.layout_;
    if (l_.ordered_) {
      for (int p : active_) {
        const auto pi = static_cast<std::size_t>(p);
        if (recv_pos_[pi] < l_.recv_queues_[pi].size()) check_length(p, s_.recvs[l_.recv_queues_[pi][recv_pos_[pi]]]);
      }
    }
    if (desc_.p2p()) return;
    for (int p = 0; p < l_.size_; ++p) {
      const auto pi = static_cast<std::size_t>(p);
      if (p == l_.rank_ || recv_pos_[pi] < l_.recv_queues_[pi].size()) continue;
      const Peer& peer = l_.peers_[pi];
      const std::uint64_t m = peer.consumed + 1;
      const std::uint64_t slot = (m - 1) % lay.slots;
      const auto* h = reinterpret_cast<const WireHeader*>(l_.base_ + lay.inbox_slot(p, slot));
      // Its length is not known here: take the header's (possibly still
      // landing) word for it; arrived() only trusts a matching trailer.
      const std::size_t len = std::min<std::size_t>(peek(h->len), l_.config_.chunk);
      if (!arrived(p, slot, m, len)) continue;
      if (h->seq == desc_.seq && h->op != static_cast<std::uint8_t>(CollOp::Send)) {
        const std::string detail = "rank " + std::to_string(p) + " sent this rank a message it expects nothing for";
        l_.fail_mismatch(desc_, p, h, detail.c_str());
      }
    }
  }

  // The next message from p has landed whole at the length its header
  // gives, which is not the length `op` expects: validate() says why.
  void check_length(int p, const RecvOp& op) {
    const Layout& lay = *l_.layout_;
    const Peer& peer = l_.peers_[static_cast<std::size_t>(p)];
    const std::uint64_t m = peer.consumed + 1;
    const std::uint64_t slot = (m - 1) % lay.slots;
    const auto* h = reinterpret_cast<const WireHeader*>(l_.base_ + lay.inbox_slot(p, slot));
    if (peek(h->msg) != m) return;
    const std::size_t expected =
        op.announcement ? sizeof(Announcement) : std::min(l_.config_.chunk, op.bytes - op.done);
    const std::size_t polled = op.direct ? 0 : expected;
    const std::uint16_t flags = peek(h->flags);
    const std::size_t theirs = (flags & kDirect) != 0 ? 0 : std::min<std::size_t>(peek(h->len), l_.config_.chunk);
    if (theirs == polled || !arrived(p, slot, m, theirs)) return;
    const auto index = static_cast<std::size_t>(&op - s_.recvs.data());
    validate(p, *h, m, op, recv_state_[index], expected);
  }

  bool pending(int p) const {
    const auto pi = static_cast<std::size_t>(p);
    return send_pos_[pi] < l_.send_queues_[pi].size() || recv_pos_[pi] < l_.recv_queues_[pi].size();
  }

  std::string waiting_for() const {
    for (int p : active_) {
      const auto pi = static_cast<std::size_t>(p);
      if (recv_pos_[pi] < l_.recv_queues_[pi].size()) {
        const RecvOp& op = s_.recvs[l_.recv_queues_[pi][recv_pos_[pi]]];
        return "waiting for " + std::to_string(op.bytes - op.done) + " of " + std::to_string(op.bytes) +
               " bytes from rank " + std::to_string(p);
      }
    }
    for (int p : active_) {
      const auto pi = static_cast<std::size_t>(p);
      if (send_pos_[pi] < l_.send_queues_[pi].size()) {
        return "waiting to send to rank " + std::to_string(p) + " (its buffers are full: it is not receiving)";
      }
    }
    return "waiting for completions";
  }

 private:
  void check_peer(int peer, const char* what) {
    if (peer < 0 || peer >= l_.size_ || peer == l_.rank_) {
      throw Error(ErrorCode::InvalidArgument,
                  std::string("internal schedule error: ") + what + " with rank " + std::to_string(peer),
                  {.op = describe(desc_), .rank = l_.rank_});
    }
  }

  bool recv_complete(int index) const {
    const RecvOp& op = s_.recvs[static_cast<std::size_t>(index)];
    return op.done == op.bytes && recv_state_[static_cast<std::size_t>(index)].any;
  }

  bool send_complete(int index) const {
    const SendOp& op = s_.sends[static_cast<std::size_t>(index)];
    const SendState& st = send_state_[static_cast<std::size_t>(index)];
    return st.sent == op.bytes && st.any;
  }

  bool pump_sends(int p, const std::vector<std::uint32_t>& queue, std::size_t& pos) {
    bool moved = false;
    Peer& peer = l_.peers_[static_cast<std::size_t>(p)];
    const Layout& lay = *l_.layout_;
    while (pos < queue.size()) {
      const std::uint32_t index = queue[pos];
      const SendOp& op = s_.sends[index];
      SendState& st = send_state_[index];
      std::size_t len = op.announce ? 0 : std::min(l_.config_.chunk, op.bytes - st.sent);
      if (op.rtr >= 0 && !recv_complete(op.rtr)) return moved;
      if (op.after >= 0) {
        const RecvOp& dep = s_.recvs[static_cast<std::size_t>(op.after)];
        if (op.stream) {
          if (dep.done < st.sent + len && !recv_complete(op.after)) return moved;
        } else if (!recv_complete(op.after)) {
          return moved;
        }
      }
      const std::uint64_t m = peer.sent + 1;
      if (m > lay.slots) {
        if (l_.credit_word(p).load(std::memory_order_acquire) < m - lay.slots) return moved;
      }
      const std::uint64_t slot = (m - 1) % lay.slots;
      char* stage = l_.base_ + lay.staging_slot(p, slot);
      auto* h = reinterpret_cast<WireHeader*>(stage);
      h->msg = m;
      h->seq = st.seq;
      h->count = desc_.count;
      h->offset = st.sent;
      h->len = static_cast<std::uint32_t>(len);
      h->root = desc_.root;
      h->transfer = static_cast<std::uint16_t>(st.transfer);
      h->op = static_cast<std::uint8_t>(desc_.p2p() ? CollOp::Send : desc_.op);
      h->type = static_cast<std::uint8_t>(desc_.type);
      h->redop = static_cast<std::uint8_t>(desc_.redop);
      h->algo = static_cast<std::uint8_t>(desc_.algo);
      const bool in_place = op.in_place && (len > l_.config_.stage_limit || op.rtr >= 0);
      const bool last = op.announce || st.sent + len == op.bytes;
      st.any_in_place = st.any_in_place || in_place;
      // The last message of a transfer that wrote anything in place asks for
      // credit at once; credit for it covers every earlier message too. So
      // does every transfer of a rooted operation, whose senders would
      // otherwise not learn that a receiver called something else.
      const bool confirm = last && (st.any_in_place || confirm_sends_);
      h->flags = confirm ? kCreditNow : 0;
      if (confirm) l_.credit_wait_[static_cast<std::size_t>(p)] = m;
      const char* src = static_cast<const char*>(op.src) + st.sent;
      const std::uint32_t lkey = l_.region_->lkey();
      if (op.announce) {
        // The payload is where this rank's buffer is, for the peer to write into.
        Announcement a{reinterpret_cast<std::uint64_t>(op.src), op.bytes,
                       l_.rkey_for(const_cast<void*>(op.src), op.bytes), 0};
        len = sizeof(a);
        h->len = static_cast<std::uint32_t>(len);
        h->offset = 0;
        h->flags |= kAnnounce;
        std::memcpy(stage + kHeader, &a, sizeof(a));
        src = stage + kHeader;
      }
      const bool direct = op.rtr >= 0;
      if (direct) {
        // Payload straight into the receiver's buffer; the slot message that
        // follows on the same QP (WRITEs land in order) says it is there.
        const RecvOp& ann = s_.recvs[static_cast<std::size_t>(op.rtr)];
        if (len != 0) {
          Sge data{reinterpret_cast<std::uint64_t>(src), static_cast<std::uint32_t>(len),
                   l_.lkey_for(op.src, op.bytes)};
          SendWr dw;
          dw.opcode = Opcode::RdmaWrite;
          dw.sg_list = {&data, 1};
          dw.remote_addr = ann.remote_addr + op.rtr_offset + (st.sent);
          dw.rkey = ann.remote_key;
          dw.signaled = false;
          ++peer.unsignaled;
          l_.post(p, dw);
        }
        h->flags |= kDirect;
      }
      const std::size_t wire_len = direct ? 0 : len;  // payload bytes in the slot
      const std::size_t trailer = trailer_offset(wire_len);
      // With ordered placement the flag is the message's own last word: one
      // WRITE of header, payload and trailer. Otherwise a second WRITE sets
      // the slot's flag after the message has landed.
      const bool one_write = l_.ordered_;
      Sge sges[3];
      std::size_t nsge = 1;
      if (in_place && !direct) {
        sges[0] = {reinterpret_cast<std::uint64_t>(stage), static_cast<std::uint32_t>(kHeader), lkey};
        sges[1] = {reinterpret_cast<std::uint64_t>(src), static_cast<std::uint32_t>(len),
                   l_.lkey_for(op.src, op.bytes)};
        nsge = 2;
        if (one_write) {  // padding and trailer, from the staging slot
          sges[2] = {reinterpret_cast<std::uint64_t>(stage + kHeader + len),
                     static_cast<std::uint32_t>(trailer + 8 - kHeader - len), lkey};
          nsge = 3;
        }
      } else {
        if (wire_len != 0 && src != stage + kHeader) combine_.copy(stage + kHeader, src, wire_len);
        sges[0] = {reinterpret_cast<std::uint64_t>(stage),
                   static_cast<std::uint32_t>(one_write ? trailer + 8 : kHeader + wire_len), lkey};
      }
      SendWr wr;
      wr.opcode = Opcode::RdmaWrite;
      wr.sg_list = {sges, nsge};
      wr.remote_addr = peer.remote_base + lay.inbox_slot(l_.rank_, slot);
      wr.rkey = peer.rkey;
      st.sent = op.announce ? op.bytes : st.sent + len;
      st.any = true;
      const std::uint64_t flag_value = m ^ peer.salt;
      if (one_write) {
        std::memcpy(stage + trailer, &flag_value, 8);
      } else {
        wr.signaled = false;
        ++peer.unsignaled;
        l_.post(p, wr);
        auto* flag_src = reinterpret_cast<Word*>(l_.base_ + lay.staging_flag(p, slot));
        flag_src->value.store(flag_value, std::memory_order_relaxed);
        sges[0] = {reinterpret_cast<std::uint64_t>(flag_src), 8, lkey};
        wr.sg_list = {sges, 1};
        wr.remote_addr = peer.remote_base + lay.inbox_flag(l_.rank_, slot);
      }
      wr.signaled = ++peer.unsignaled >= kSignalEvery;
      if (wr.signaled) {
        peer.unsignaled = 0;
        wr.wr_id = make_wr_id(kRecycle, p, l_.generation_);
        ++l_.outstanding_signaled_;
        ++peer.signaled_out;
      }
      l_.post(p, wr);
      peer.sent = m;
      moved = true;
      if (last) {
        ++pos;
        --remaining_;
      }
    }
    return moved;
  }

  bool pump_recvs(int p, const std::vector<std::uint32_t>& queue, std::size_t& pos) {
    bool moved = false;
    Peer& peer = l_.peers_[static_cast<std::size_t>(p)];
    const Layout& lay = *l_.layout_;
    while (pos < queue.size()) {
      const std::uint32_t index = queue[pos];
      RecvOp& op = s_.recvs[index];
      RecvState& st = recv_state_[index];
      const std::size_t len = op.announcement ? sizeof(Announcement) : std::min(l_.config_.chunk, op.bytes - op.done);
      if (op.after >= 0) {
        const RecvOp& dep = s_.recvs[static_cast<std::size_t>(op.after)];
        if (op.stream) {
          if (dep.done < op.done + len && !recv_complete(op.after)) return moved;
        } else if (!recv_complete(op.after)) {
          return moved;
        }
      }
      if (op.after_send >= 0 && !send_complete(op.after_send) &&
          send_state_[static_cast<std::size_t>(op.after_send)].sent < op.done + len) {
        return moved;
      }
      const std::uint64_t m = peer.consumed + 1;
      const std::uint64_t slot = (m - 1) % lay.slots;
      const char* msg = l_.base_ + lay.inbox_slot(p, slot);
      if (!arrived(p, slot, m, op.direct ? 0 : len)) return moved;
      const auto* h = reinterpret_cast<const WireHeader*>(msg);
      validate(p, *h, m, op, st, len);
      const char* payload = msg + kHeader;
      if (op.announcement) {
        Announcement a;
        std::memcpy(&a, payload, sizeof(a));
        op.remote_addr = a.addr;
        op.remote_key = a.rkey;
        op.done = op.bytes;  // one message, whatever the announced size
        st.any = true;
        peer.consumed = m;
        l_.return_credit(peer, (h->flags & kCreditNow) != 0);
        moved = true;
        ++pos;
        --remaining_;
        continue;
      }
      if (len != 0 && !op.direct) {
        char* dst = static_cast<char*>(op.dst) + op.done;
        if (op.reduce_with != nullptr) {
          combine_.reduce_received(dst, static_cast<const char*>(op.reduce_with) + op.done, payload,
                                   len / combine_.elem);
        } else {
          combine_.place_received(dst, payload, len);
        }
        if (op.finalize) combine_.finalize(dst, len / combine_.elem);
      }
      op.done += len;
      st.any = true;
      peer.consumed = m;
      l_.return_credit(peer, (h->flags & kCreditNow) != 0);
      moved = true;
      if (op.done == op.bytes) {
        ++pos;
        --remaining_;
      }
    }
    return moved;
  }

  // Has message m from peer p, expected `len` bytes long, landed in its slot?
  // With ordered placement its trailer says so; a stale trailer that happens
  // to hold the value (old payload bytes where a longer message had its
  // payload) is told apart by the header's number, which the message wrote
  // before its trailer.
  bool arrived(int p, std::uint64_t slot, std::uint64_t m, std::size_t len) const {
    const Layout& lay = *l_.layout_;
    const std::uint64_t want = m ^ l_.salt_from(p);
    const char* msg = l_.base_ + lay.inbox_slot(p, slot);
    if (!l_.ordered_) {
      auto* flag = reinterpret_cast<const Word*>(l_.base_ + lay.inbox_flag(p, slot));
      return flag->value.load(std::memory_order_acquire) == want;
    }
    const auto* trailer = reinterpret_cast<const std::uint64_t*>(msg + trailer_offset(len));
    if (peek(*trailer, std::memory_order_acquire) != want) return false;  // may be mid-placement
    return reinterpret_cast<const WireHeader*>(msg)->msg == m;
  }

  void validate(int p, const WireHeader& h, std::uint64_t m, const RecvOp& op, const RecvState& st, std::size_t len) {
    if (h.msg != m) {
      l_.fail_peer(desc_, p,
                   "malformed message " + std::to_string(m) + " (numbered " + std::to_string(h.msg) +
                       "): its buffers were overwritten or it runs another rdmx version");
    }
    const bool theirs_p2p = h.op == static_cast<std::uint8_t>(CollOp::Send);
    bool same;
    if (desc_.p2p()) {
      same = theirs_p2p && h.seq == st.seq && h.type == static_cast<std::uint8_t>(desc_.type);
    } else {
      same = !theirs_p2p && h.seq == desc_.seq && h.op == static_cast<std::uint8_t>(desc_.op) &&
             h.type == static_cast<std::uint8_t>(desc_.type) && h.count == desc_.count && h.root == desc_.root &&
             (h.redop == static_cast<std::uint8_t>(desc_.redop) || !needs_redop(desc_.op)) &&
             h.algo == static_cast<std::uint8_t>(desc_.algo);
    }
    if (!same) l_.fail_mismatch(desc_, p, &h, nullptr);
    const std::uint16_t kind = h.flags & (kDirect | kAnnounce);
    const std::uint16_t want = (op.direct ? kDirect : 0) | (op.announcement ? kAnnounce : 0);
    if (h.transfer != static_cast<std::uint16_t>(st.transfer) || h.len != len || kind != want ||
        (!op.announcement && h.offset != op.done)) {
      const std::string detail = "rank " + std::to_string(p) + " sends " + std::to_string(h.len) + " bytes at offset " +
                                 std::to_string(h.offset) + " of transfer " + std::to_string(h.transfer) +
                                 " where rank " + std::to_string(l_.rank_) + " expects " + std::to_string(len) +
                                 " at offset " + std::to_string(op.done) + " of transfer " +
                                 std::to_string(st.transfer) + " (of " + std::to_string(op.bytes) + " bytes)";
      l_.fail_mismatch(desc_, p, &h, detail.c_str());
    }
  }

  Links& l_;
  Schedule& s_;
  const OpDesc& desc_;
  const Combine& combine_;
  std::vector<SendState>& send_state_;
  std::vector<RecvState>& recv_state_;
  std::vector<int>& active_;
  std::vector<std::size_t>& send_pos_;
  std::vector<std::size_t>& recv_pos_;
  std::size_t remaining_ = 0;
  std::uint32_t checks_ = 0;
  const bool confirm_sends_ = desc_.op == CollOp::Broadcast || desc_.op == CollOp::Reduce ||
                              desc_.op == CollOp::Gather || desc_.op == CollOp::Scatter;
};

void Links::run(Schedule& schedule, const OpDesc& desc, const Combine& combine, std::chrono::milliseconds timeout) {
  try {
    run_schedule(schedule, desc, combine, timeout);
  } catch (...) {
    settle();
    operation_mrs_.clear();
    throw;
  }
  operation_mrs_.clear();
}

void Links::run_schedule(Schedule& schedule, const OpDesc& desc, const Combine& combine,
                         std::chrono::milliseconds timeout) {
  connect_schedule(schedule, desc, timeout);
  RunState state(*this, schedule, desc, combine);
  for (const SendOp& send : schedule.sends) {
    if (!send.announce)
      sent_bytes_[static_cast<std::size_t>(send.peer)].fetch_add(send.bytes, std::memory_order_relaxed);
  }
  for (const RecvOp& recv : schedule.recvs) {
    if (!recv.announcement) {
      received_bytes_[static_cast<std::size_t>(recv.peer)].fetch_add(recv.bytes, std::memory_order_relaxed);
    }
  }
  start_watch();
  // The deadline runs from here: where ranks outnumber cores, the passes
  // below yield the core each time, and 1024 of them can take seconds.
  const auto deadline = core::deadline_after(timeout);
  const bool yield = config_.yield_when_waiting;
  auto progress = [this, &state, yield] {
    device_->progress();
    state.check_failures();
    if (yield) sched_yield();
  };
  // Small operations are often done after a few passes, before any wait.
  for (int pass = 0; pass < 1024 && !state.finished(); ++pass) {
    if (!state.step()) progress();
  }
  core::WaitHooks hooks;
  hooks.progress = [p = &progress] { (*p)(); };  // one pointer: no allocation
  hooks.spin = config_.spin;
  // Everything a run waits for is a peer's WRITE into this rank's region
  // (messages, announcements, credits): where such WRITEs ring the
  // region's doorbell, a rank past its spin sleeps until one lands.
  const SlicedDoorbell sliced(region_->write_doorbell());
  const Doorbell* doorbell = sliced.get();
  while (!state.finished()) {
    auto r = core::wait_until([st = &state] { return st->step() || st->finished(); }, doorbell, deadline, hooks);
    if (r == core::WaitResult::Timeout) fail_timeout(desc, state.waiting_for());
    if (r == core::WaitResult::Aborted) fail_aborted(desc);
  }
  // User memory that in-place WRITEs read is released only once the peers
  // have consumed those messages (their credit says so).
  bool waiting = false;
  for (int p = 0; p < size_; ++p) waiting = waiting || credit_wait_[static_cast<std::size_t>(p)] != 0;
  if (waiting) {
    auto credited = [&] {
      // Revoked meanwhile: the peers that would confirm may be gone.
      if (aborted()) fail_aborted(desc);
      for (int p = 0; p < size_; ++p) {
        const std::uint64_t need = credit_wait_[static_cast<std::size_t>(p)];
        if (need == 0) continue;
        if (credit_word(p).load(std::memory_order_acquire) < need) {
          Peer& peer = peers_[static_cast<std::size_t>(p)];
          if (!peer.failure.empty() || peer.qp->state() == QpState::Error) {
            fail_peer(desc, p,
                      "it did not confirm receiving this rank's last message: " +
                          (!peer.failure.empty() ? peer.failure : peer.qp->error_reason()));
          }
          return false;
        }
        credit_wait_[static_cast<std::size_t>(p)] = 0;
      }
      return true;
    };
    auto r = core::wait_until(credited, doorbell, deadline, hooks);
    if (r == core::WaitResult::Timeout) fail_timeout(desc, "waiting for the peers to confirm its last messages");
    if (r == core::WaitResult::Aborted) fail_aborted(desc);
  }
}

}  // namespace rdmx::coll
