// SPDX-License-Identifier: MIT
#include "providers/soft_rc/qp.hpp"

#include <algorithm>
#include <array>
#include <tuple>

#include "driver/work_request.hpp"
#include "services/config.hpp"
#include "services/log.hpp"

namespace rdmx::core {

SoftRcQp::SoftRcQp(const char* provider, std::uint32_t qpn, std::uint64_t max_message, const QpParts& parts,
                   const QpCaps& caps, SoftRcDevice& device)
    : holds_(parts.holds),
      pd_(parts.pd),
      send_cq_(parts.send_cq),
      recv_cq_(parts.recv_cq),
      caps_(caps),
      qpn_(qpn),
      provider_(provider),
      max_message_(max_message),
      soft_device_(device),
      device_lock_(device.lock()) {
  sq_.resize(caps_.max_send_wr);
  rq_.resize(caps_.max_recv_wr);
}

DeviceCaps SoftRcQp::device_caps() const { return soft_device_.caps(); }

std::string SoftRcQp::error_reason() const {
  StateGuard lock(*this);
  return error_reason_;
}

ErrorContext SoftRcQp::context_of(const void* qp, const std::string& op) {
  const auto& self = *static_cast<const SoftRcQp*>(qp);
  StateGuard lock(self);
  return self.context_locked(op);
}

ErrorContext SoftRcQp::context_locked(const std::string& op) const {
  ErrorContext c;
  c.op = op;
  c.peer_rank = peer_rank_;
  c.peer_addr = peer_text_;
  return c;
}

void SoftRcQp::init() {
  StateGuard lock(*this);
  if (state() == QpState::Reset) state_.store(QpState::Init);
}

void SoftRcQp::set_error(const std::string& reason) {
  StateGuard lock(*this);
  fail_locked("set_error: " + reason, WcStatus::WrFlushErr);
}

void SoftRcQp::begin_connect_locked(std::uint64_t own_nonce, const Peer& peer, const ConnectOptions& options,
                                    const std::string& detail) {
  if (state() == QpState::Reset) state_.store(QpState::Init);
  if (state() != QpState::Init) {
    throw Error(ErrorCode::InvalidState, std::string("connect() needs a QP in INIT, this one is ") + to_string(state()),
                {.op = "connect",
                 .peer_rank = options.peer_rank,
                 .peer_addr = peer.address,
                 .hint = "create a new QP for a new connection"});
  }
  if (peer.nonce == own_nonce && peer.qpn == qpn_) {
    throw Error(ErrorCode::InvalidArgument, std::string("a ") + provider_ + " QP cannot be connected to itself",
                {.op = "connect", .peer_addr = peer.address, .hint = "connect two QPs to each other"});
  }
  ids_ = {.target_nonce = peer.nonce, .target_qpn = peer.qpn, .source_qpn = qpn_, .source_nonce = own_nonce};
  peer_rank_ = options.peer_rank;
  peer_text_ = peer.address;
  if (peer_rank_ >= 0) peer_text_ = "rank " + std::to_string(peer_rank_) + " at " + peer_text_;
  rnr_timeout_ = options.rnr_timeout.count() < 0 ? core::rnr_timeout() : options.rnr_timeout;
  connect_requested_ = true;
  connect_deadline_ = Clock::now() + core::timeout();
  initiator_ = std::make_tuple(own_nonce, qpn_) < std::make_tuple(peer.nonce, peer.qpn);
  state_.store(QpState::Rtr);
  state_.store(QpState::Rts);
  RDMX_INFO("%s qp %u: connecting to %s as %s%s", provider_, qpn_, peer_text_.c_str(),
            initiator_ ? "initiator" : "acceptor", detail.empty() ? "" : (" (" + detail + ")").c_str());
}

PostResult SoftRcQp::try_post_send(const SendWr& wr) {
  const std::uint64_t total = validate_send_wr(wr, caps_, max_message_, context_of, this);
  // The error context is built only on failure: posting is a hot path.
  auto reject = [&](ErrorCode code, const std::string& message, std::string sizes, std::string hint)
                    RDMX_REQUIRES(this) {
                      ErrorContext ctx = context_locked(std::string("post_send ") + to_string(wr.opcode));
                      ctx.sizes = std::move(sizes);
                      ctx.hint = std::move(hint);
                      throw Error(code, message, ctx);
                    };
  StateGuard lock(*this);
  const QpState s = state();
  if (s != QpState::Rts && s != QpState::Error) {
    reject(ErrorCode::InvalidState, std::string("post_send needs RTS, the QP is in ") + to_string(s), "",
           "call connect() first");
  }
  if (sq_.full()) return PostResult::QueueFull;
  if (s == QpState::Rts && post_direct_locked(wr, total)) return PostResult::Ok;
  SendEntry& e = sq_.push();
  e.wr_id = wr.wr_id;
  e.opcode = wr.opcode;
  e.signaled = wr.signaled;
  e.imm = wr.imm_data;
  e.remote_addr = wr.remote_addr;
  e.rkey = wr.rkey;
  e.compare_add = wr.compare_add;
  e.swap = wr.swap;
  e.num_sge = static_cast<std::uint32_t>(wr.sg_list.size());
  std::copy(wr.sg_list.begin(), wr.sg_list.end(), e.sges.begin());
  e.total = total;
  e.msn = next_msn_++;
  e.response_done = false;
  e.response_bytes = 0;
  e.ack_requested = false;
  e.rnr_seen = false;
  e.staging = 0;
  e.awaiting_staging = false;
  e.device_payload = false;
  if (s == QpState::Error) {
    // As in IB: work posted to a QP in ERROR completes with WR_FLUSH_ERR.
    push_send_completion_locked(e, WcStatus::WrFlushErr);
    sq_.pop();
    acked_msn_ = next_msn_;
    return PostResult::Ok;
  }
  std::array<RegionMemory, kSoftMaxSge> memory{};
  bool device_memory = false;
  if (!check_send_sges_locked(e, memory, device_memory)) return PostResult::Ok;
  if (device_memory && carries_payload(e.opcode) && copies_device_payloads()) {
    e.device_payload = true;
  } else if (device_memory) {
    // In order: behind a request waiting for room, this one waits too.
    if (awaiting_staging_ > 0 || !staging_.has_room(e.total)) {
      e.awaiting_staging = true;
      ++awaiting_staging_;
    } else if (!stage_send_locked(e, memory)) {
      return PostResult::Ok;
    }
  }
  send_queued_locked(e);
  return PostResult::Ok;
}

void SoftRcQp::post_send(const SendWr& wr) {
  if (try_post_send(wr) == PostResult::Ok) return;
  StateGuard lock(*this);
  ErrorContext ctx = context_locked(std::string("post_send ") + to_string(wr.opcode));
  ctx.sizes = "max_send_wr=" + std::to_string(sq_.capacity());
  ctx.hint = "poll the send CQ; post a signaled WR periodically so completed WRs free their slots";
  throw Error(ErrorCode::QueueFull, "send queue full", ctx);
}

bool SoftRcQp::check_send_sges_locked(const SendEntry& e, std::array<RegionMemory, kSoftMaxSge>& memory,
                                      bool& device_memory) {
  const Access need = carries_payload(e.opcode) ? Access::None : Access::LocalWrite;
  for (std::uint32_t i = 0; i < e.num_sge; ++i) {
    const Sge& sge = e.sges[i];
    auto verdict = local_key_.check(pd_.registry(), false, &pd_, sge.lkey, sge.addr, sge.length, need);
    if (verdict != AccessCheck::Ok) {
      fail_locked("post_send " + std::string(to_string(e.opcode)) + " wr_id " + std::to_string(e.wr_id) +
                      ": local SGE " + std::to_string(i) + " (addr " + hex(sge.addr) + ", length " +
                      std::to_string(sge.length) + ", lkey " + hex(sge.lkey) + "): " + to_string(verdict),
                  WcStatus::LocProtErr, e.msn);
      return false;
    }
    if (sge.length > 0 && Staging::needs(local_key_.verdict())) {
      memory[i] = local_key_.verdict().memory;
      device_memory = true;
    }
  }
  return true;
}

bool SoftRcQp::stage_send_locked(SendEntry& e, const std::array<RegionMemory, kSoftMaxSge>& memory) {
  try {
    staging_.stage_send(e, memory);
    return true;
  } catch (const Error& error) {
    fail_locked("post_send " + std::string(to_string(e.opcode)) + " wr_id " + std::to_string(e.wr_id) +
                    ": copying its device memory to a host buffer failed: " + error.message(),
                WcStatus::LocProtErr, e.msn);
    return false;
  }
}

bool SoftRcQp::ready_to_send_locked(SendEntry& e) {
  if (!e.awaiting_staging) return true;
  if (!staging_.has_room(e.total)) return false;
  e.awaiting_staging = false;
  --awaiting_staging_;
  // Checked again: the buffers may have been deregistered while it waited.
  std::array<RegionMemory, kSoftMaxSge> memory{};
  bool device_memory = false;
  if (!check_send_sges_locked(e, memory, device_memory)) return false;
  return !device_memory || stage_send_locked(e, memory);
}

void SoftRcQp::post_recv(const RecvWr& wr) {
  const std::uint64_t capacity = validate_recv_wr(wr, caps_, context_of, this);
  StateGuard lock(*this);
  const QpState s = state();
  if (s == QpState::Reset) {
    ErrorContext ctx = context_locked("post_recv");
    ctx.hint = "call init() or connect() first";
    throw Error(ErrorCode::InvalidState, "post_recv needs INIT or later, the QP is in RESET", ctx);
  }
  if (rq_.full()) {
    ErrorContext ctx = context_locked("post_recv");
    ctx.sizes = "max_recv_wr=" + std::to_string(rq_.capacity());
    ctx.hint = "poll the receive CQ before posting more";
    throw Error(ErrorCode::QueueFull, "receive queue full", ctx);
  }
  RecvEntry entry{};
  entry.wr_id = wr.wr_id;
  entry.num_sge = static_cast<std::uint32_t>(wr.sg_list.size());
  std::copy(wr.sg_list.begin(), wr.sg_list.end(), entry.sges.begin());
  entry.capacity = capacity;
  if (s == QpState::Error) {
    push_recv_completion_locked(entry, WcStatus::WrFlushErr, WcOpcode::Recv, 0, false, 0);
    return;
  }
  // Device memory is received through a host buffer. A buffer that fails
  // the check is left as it is: the transport reports it when a message
  // arrives for it, as it does for host memory.
  std::array<RegionMemory, kSoftMaxSge> memory{};
  bool device_memory = false;
  const std::uint32_t examined = pd_.registry().holds_device_memory() ? entry.num_sge : 0;
  for (std::uint32_t i = 0; i < examined; ++i) {
    const Sge& sge = entry.sges[i];
    if (sge.length > 0 &&
        local_key_.check(pd_.registry(), false, &pd_, sge.lkey, sge.addr, sge.length, Access::LocalWrite) ==
            AccessCheck::Ok &&
        Staging::needs(local_key_.verdict())) {
      memory[i] = local_key_.verdict().memory;
      device_memory = true;
    }
  }
  if (device_memory) staging_.stage_recv(entry, memory);
  rq_.push() = entry;
  recv_queued_locked();
}

SendEntry* SoftRcQp::entry_for_msn_locked(std::uint32_t msn, std::size_t within) {
  if (sq_.empty()) return nullptr;
  const std::uint32_t distance = msn - sq_.front().msn;
  if (distance >= std::min(within, sq_.size())) return nullptr;
  return &sq_.at(distance);
}

void SoftRcQp::note_rnr_locked(SendEntry& entry, Clock::time_point now) {
  entry.rnr_seen = true;
  entry.first_rnr = now;
}

void SoftRcQp::retire_head_locked() {
  retired_locked(sq_.front());
  staging_.release(sq_.front().staging);
  sq_.pop();
}

bool SoftRcQp::settle_locked(const SendEntry& e) {
  if (e.staging == 0) return true;
  std::string why;
  bool settled = false;
  try {
    settled = staging_.settle(e.staging, needs_response(e.opcode), e.total, why);
  } catch (const Error& error) {
    why = "copying the answer to device memory failed: " + error.message();
  }
  if (settled) return true;
  fail_locked(std::string(to_string(e.opcode)) + " wr_id " + std::to_string(e.wr_id) + ": " + why, WcStatus::LocProtErr,
              e.msn);
  return false;
}

void SoftRcQp::complete_done_locked(std::size_t sent) {
  for (; sent > 0 && !sq_.empty() && state() != QpState::Error; --sent) {
    SendEntry& e = sq_.front();
    const bool done = needs_response(e.opcode) ? e.response_done : msn_before(e.msn, acked_msn_);
    if (!done || !settle_locked(e)) return;
    if (e.signaled && !push_send_completion_locked(e, WcStatus::Success)) return;
    retire_head_locked();
  }
}

bool SoftRcQp::push_send_completion_locked(const SendEntry& e, WcStatus status) {
  return push_send_completion_locked(e.wr_id, e.opcode, e.total, status);
}

bool SoftRcQp::push_send_completion_locked(std::uint64_t wr_id, Opcode opcode, std::uint64_t total, WcStatus status) {
  WorkCompletion wc;
  wc.wr_id = wr_id;
  wc.status = status;
  wc.opcode = completion_opcode(opcode);
  wc.byte_len = status == WcStatus::Success ? static_cast<std::uint32_t>(total) : 0;
  wc.qp_num = qpn_;
  if (send_cq_.push(wc)) return true;
  fail_locked("send completion queue overflowed", WcStatus::WrFlushErr);
  return false;
}

bool SoftRcQp::push_recv_completion_locked(const RecvEntry& e, WcStatus status, WcOpcode opcode, std::uint32_t byte_len,
                                           bool with_imm, std::uint32_t imm) {
  std::string staging_failure;
  if (e.staging != 0) {
    bool settled = true;
    if (status == WcStatus::Success) {
      try {
        // A WRITE_WITH_IMM consumes the receive but places nothing in it:
        // its byte_len counts the bytes written into the target region.
        const bool placed = opcode != WcOpcode::RecvRdmaWithImm;
        settled = staging_.settle(e.staging, placed, byte_len, staging_failure);
      } catch (const Error& error) {
        settled = false;
        staging_failure = "copying the message to device memory failed: " + error.message();
      }
    }
    staging_.release(e.staging);
    if (!settled) status = WcStatus::LocProtErr;
  }
  WorkCompletion wc;
  wc.wr_id = e.wr_id;
  wc.status = status;
  wc.opcode = opcode;
  wc.byte_len = status == WcStatus::Success ? byte_len : 0;
  wc.with_imm = with_imm && status == WcStatus::Success;
  wc.imm_data = wc.with_imm ? imm : 0;
  wc.qp_num = qpn_;
  if (!recv_cq_.push(wc)) {
    fail_locked("receive completion queue overflowed", WcStatus::WrFlushErr);
    return false;
  }
  if (!staging_failure.empty()) {
    fail_locked("receive wr_id " + std::to_string(e.wr_id) + ": " + staging_failure, WcStatus::WrFlushErr);
    return false;
  }
  return true;
}

void SoftRcQp::fail_locked(const std::string& reason, WcStatus status, std::optional<std::uint32_t> failing_msn) {
  if (state() == QpState::Error) return;
  state_.store(QpState::Error, std::memory_order_release);
  error_reason_ = reason;
  // A peer that left in order while this QP waits for nothing is the normal
  // end of a job; any other loss is worth a warning.
  if (sq_.empty() && rq_.empty() && peer_left_in_order_locked(reason)) {
    RDMX_INFO("%s qp %u -> ERROR: %s", provider_, qpn_, reason.c_str());
  } else {
    RDMX_WARN("%s qp %u -> ERROR: %s", provider_, qpn_, reason.c_str());
  }
  stop_peer_access_locked();
  // In MSN order: the failing WR (the oldest unless named) gets `status`, the rest WR_FLUSH_ERR.
  bool first = true;
  while (!sq_.empty()) {
    const SendEntry& e = sq_.front();
    const bool is_failing = failing_msn ? e.msn == *failing_msn : first;
    // Already in ERROR, a push that overflows changes nothing more: the CQ reports itself.
    push_send_completion_locked(e, is_failing ? status : WcStatus::WrFlushErr);
    first = false;
    staging_.release(e.staging);
    sq_.pop();
  }
  awaiting_staging_ = 0;
  acked_msn_ = next_msn_;
  error_entered_locked();
  while (!rq_.empty()) {
    push_recv_completion_locked(rq_.front(), WcStatus::WrFlushErr, WcOpcode::Recv, 0, false, 0);
    rq_.pop();
  }
}

}  // namespace rdmx::core
