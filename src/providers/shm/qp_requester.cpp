// SPDX-License-Identifier: MIT
// The requester of a shm QP: work requests go into the outbound ring in MSN
// order (small payloads inline, large ones as a list of our buffers for the
// responder to copy across), and complete when the responder's `executed`
// word or their answer says so.
#include <algorithm>
#include <cstring>

#include "driver/work_request.hpp"
#include "providers/shm/shm_qp.hpp"

namespace rdmx::shm {

using core::consumes_receive;
using core::msn_before;
using core::needs_response;

int sge_iovecs(const std::array<Sge, kMaxSge>& sges, std::uint32_t num, std::uint64_t length, iovec* out) {
  int n = 0;
  for (std::uint32_t i = 0; i < num && length > 0; ++i) {
    std::uint64_t take = std::min<std::uint64_t>(sges[i].length, length);
    if (take == 0) continue;
    out[n++] = {reinterpret_cast<void*>(sges[i].addr), take};
    length -= take;
  }
  return n;
}

void ShmQp::send_queued_locked(SendEntry&) {
  if (!peer_gone_.empty()) return fail_locked(peer_gone_, WcStatus::RetryExcErr);
  device_.note_application_activity();
  pump_locked();
}

// ---------------------------------------------------------------------------
// Requester.

void ShmQp::pump_locked() {
  if (!out_.attached() || state() == QpState::Error) return;
  bool put = false;
  while (sq_sent_ < sq_.size()) {
    SendEntry& e = sq_.at(sq_sent_);
    if (!ready_to_send_locked(e) || !put_request_locked(e)) break;
    ++sq_sent_;
    put = true;
  }
  if (put) wake_peer_locked();
}

bool ShmQp::put_request_locked(SendEntry& e) {
  RecordType type = RecordType::Send;
  switch (e.opcode) {
    case Opcode::Send:
    case Opcode::SendWithImm: type = RecordType::Send; break;
    case Opcode::RdmaWrite:
    case Opcode::RdmaWriteWithImm: type = RecordType::Write; break;
    case Opcode::RdmaRead: type = RecordType::Read; break;
    case Opcode::AtomicFetchAdd: type = RecordType::FetchAdd; break;
    case Opcode::AtomicCmpSwap: type = RecordType::CmpSwap; break;
  }
  const bool payload_op = core::carries_payload(e.opcode);
  const bool cross = (payload_op || e.opcode == Opcode::RdmaRead) && e.total > eager_;
  iovec iov[kMaxSge];
  int iov_count = cross ? sge_iovecs(e.sges, e.num_sge, e.total, iov) : 0;
  std::size_t payload = cross ? iov_count * sizeof(RemoteIov) : (payload_op ? e.total : 0);
  Record* r = out_.reserve(payload);
  if (r == nullptr) return false;
  r->type = type;
  r->flags = static_cast<std::uint8_t>(
      (cross ? kCrossMemory : 0) |
      (e.opcode == Opcode::SendWithImm || e.opcode == Opcode::RdmaWriteWithImm ? kWithImm : 0));
  e.ack_requested = !needs_response(e.opcode) && (e.signaled || sq_.size() * 2 >= sq_.capacity());
  if (e.ack_requested) {
    r->flags |= kAckRequest;
    ++ack_requests_outstanding_;
  }
  r->msn = e.msn;
  r->rkey = e.rkey;
  r->imm = e.imm;
  r->length = static_cast<std::uint32_t>(e.total);
  r->remote_addr = e.remote_addr;
  r->arg0 = e.compare_add;
  r->arg1 = cross ? static_cast<std::uint64_t>(iov_count) : e.swap;
  if (cross) {
    auto* list = reinterpret_cast<RemoteIov*>(r->data);
    for (int i = 0; i < iov_count; ++i) {
      RemoteIov piece{reinterpret_cast<std::uint64_t>(iov[i].iov_base), iov[i].iov_len};
      std::memcpy(list + i, &piece, sizeof(piece));
    }
  } else if (payload_op) {
    std::uint8_t* to = r->data;
    for (std::uint32_t i = 0; i < e.num_sge; ++i) {
      std::memcpy(to, reinterpret_cast<const void*>(e.sges[i].addr), e.sges[i].length);
      to += e.sges[i].length;
    }
  }
  out_.publish(r);
  return true;
}

core::SendEntry* ShmQp::entry_for_msn_locked(std::uint32_t msn) {
  return SoftRcQp::entry_for_msn_locked(msn, sq_sent_);
}

bool ShmQp::ack_wanted_locked() const {
  return ack_requests_outstanding_ > 0 || rnr_outstanding_ > 0 || sq_.size() * 2 >= sq_.capacity();
}

void ShmQp::retired_locked(const SendEntry& e) {
  if (e.ack_requested) --ack_requests_outstanding_;
  if (e.rnr_seen) --rnr_outstanding_;
  --sq_sent_;
}

void ShmQp::complete_acknowledged_locked() {
  if (out_control_ == nullptr || sq_sent_ == 0) return;
  // The shared word is read only when a completion, free slots or an RNR
  // clock wait for it; READ and atomic answers acknowledge by themselves.
  if (ack_wanted_locked()) {
    const std::uint32_t executed = out_control_->executed.load(std::memory_order_acquire);
    if (msn_before(acked_msn_, executed)) acked_msn_ = executed;
  }
  complete_done_locked(sq_sent_);
}

ShmQp::Step ShmQp::handle_response_locked(const Record* r, std::uint16_t slots, std::uint64_t offset) {
  const RecordType type = r->type;
  const std::uint32_t msn = r->msn;
  const std::uint8_t flags = r->flags;
  const std::uint32_t length = r->length;
  const std::uint64_t arg0 = r->arg0;
  SendEntry* e = entry_for_msn_locked(msn);
  auto bad = [&](const std::string& what) RDMX_REQUIRES(this) {
    protocol_error_locked(what + " (msn " + std::to_string(msn) + ")");
    return Step::Failed;
  };
  switch (type) {
    case RecordType::ReadResponse: {
      if (e == nullptr || e->opcode != Opcode::RdmaRead || e->response_done) return bad("unexpected READ response");
      if ((flags & kCrossMemory) == 0) {
        if (length != e->total || !in_.well_formed(slots, length, offset)) {
          return bad("READ response of the wrong size");
        }
        const std::uint8_t* from = RingConsumer::payload(r);
        for (std::uint32_t i = 0; i < e->num_sge; ++i) {
          const Sge& s = e->sges[i];
          if (s.length == 0) continue;
          auto verdict = local_key_.check(pd_.registry(), false, &pd_, s.lkey, s.addr, s.length, Access::LocalWrite);
          if (verdict != core::AccessCheck::Ok) {
            fail_locked("READ wr_id " + std::to_string(e->wr_id) + ": local SGE " + std::to_string(i) + ": " +
                            core::to_string(verdict),
                        WcStatus::LocProtErr, msn);
            return Step::Failed;
          }
          std::memcpy(reinterpret_cast<void*>(s.addr), from, s.length);
          from += s.length;
        }
      }
      e->response_done = true;
      if (msn_before(acked_msn_, msn + 1)) acked_msn_ = msn + 1;
      return Step::Done;
    }
    case RecordType::AtomicResponse: {
      if (e == nullptr || !core::is_atomic(e->opcode) || e->response_done) return bad("unexpected atomic response");
      const Sge& s = e->sges[0];
      core::AccessCheck verdict = local_key_.check(pd_.registry(), false, &pd_, s.lkey, s.addr, 8, Access::LocalWrite);
      if (verdict == core::AccessCheck::Ok) std::memcpy(reinterpret_cast<void*>(s.addr), &arg0, 8);
      if (verdict != core::AccessCheck::Ok) {
        fail_locked("atomic wr_id " + std::to_string(e->wr_id) + ": result SGE: " + core::to_string(verdict),
                    WcStatus::LocProtErr, msn);
        return Step::Failed;
      }
      e->response_done = true;
      if (msn_before(acked_msn_, msn + 1)) acked_msn_ = msn + 1;
      return Step::Done;
    }
    case RecordType::RnrNak: {
      // The responder sends this when it starts holding a SEND for want of a
      // receive, and publishes `executed` (a shared word, not a record) when
      // a receive lets the SEND run. So the notice can arrive after the news
      // that the SEND was executed, even after the SEND completed here: it is
      // stale then, not a protocol error.
      if (e == nullptr) {
        if (msn_before(msn, acked_msn_)) return Step::Done;
        return bad("RNR NAK for no outstanding request");
      }
      if (!consumes_receive(e->opcode)) return bad("RNR NAK for a request that consumes no receive");
      if (e->rnr_seen) return Step::Done;
      const std::uint32_t executed = out_control_->executed.load(std::memory_order_acquire);
      if (msn_before(acked_msn_, executed)) acked_msn_ = executed;
      if (msn_before(msn, acked_msn_)) return Step::Done;  // executed already; completes with its ACK
      note_rnr_locked(*e, core::Clock::now());
      ++rnr_outstanding_;
      return Step::Done;
    }
    case RecordType::Nak: {
      if (e == nullptr) return bad("NAK for no outstanding request");
      if (arg0 > static_cast<std::uint64_t>(WcStatus::GeneralErr)) return bad("NAK with an unknown status");
      // The responder executes in order: everything before the NAKed request was done.
      while (sq_sent_ > 0 && sq_.front().msn != msn) {
        SendEntry& done = sq_.front();
        if (needs_response(done.opcode) && !done.response_done) break;
        if (!settle_locked(done)) return Step::Failed;
        if (done.signaled) push_send_completion_locked(done, WcStatus::Success);
        retire_head_locked();
      }
      const auto status = static_cast<WcStatus>(arg0);
      fail_locked(describe_peer() + " refused request msn " + std::to_string(msn) + " (" + to_string(e->opcode) +
                      " wr_id " + std::to_string(e->wr_id) + "): " + to_string(status),
                  status, msn);
      return Step::Failed;
    }
    case RecordType::Bye: peer_gone_locked(describe_peer() + "'s QP entered ERROR", false); return Step::Done;
    case RecordType::Revoke: revoke_peer_region_locked(static_cast<std::uint32_t>(arg0)); return Step::Done;
    default: return bad("unknown record type " + std::to_string(static_cast<int>(type)));
  }
}

}  // namespace rdmx::shm
