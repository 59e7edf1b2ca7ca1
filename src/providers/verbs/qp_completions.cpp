// SPDX-License-Identifier: MIT
// A verbs QP's completions: its hardware CQ drained into the rdmx CQs it was
// created with, each hardware completion turned into rdmx's (the receive's
// own wr_id, the statuses rdmx reports where the hardware's differ), and
// flushes held back until the completion that explains them has been seen.
#include <arpa/inet.h>

#include "driver/work_request.hpp"
#include "providers/verbs/verbs_device.hpp"
#include "providers/verbs/verbs_qp.hpp"
#include "services/log.hpp"

namespace rdmx::verbs {
namespace {

// rdmx's WcStatus is ibv_wc_status, value for value.
WcStatus status_of(ibv_wc_status status) {
  return static_cast<int>(status) <= static_cast<int>(WcStatus::GeneralErr) ? static_cast<WcStatus>(status)
                                                                            : WcStatus::GeneralErr;
}

}  // namespace

void VerbsQp::arm() { ibv_req_notify_cq(cq_, 0); }

std::size_t VerbsQp::drain() {
  std::size_t total = 0;
  ibv_wc wcs[32];
  for (;;) {
    const int n = ibv_poll_cq(cq_, 32, wcs);
    if (n <= 0) {
      if (n < 0) enter_error("ibv_poll_cq failed: the device's completion queue is broken");
      break;
    }
    for (int i = 0; i < n; ++i) handle(wcs[i]);
    total += static_cast<std::size_t>(n);
    if (n < 32) break;
  }
  if (total > 0) release_held_flushes();
  return total;
}

void VerbsQp::handle(const ibv_wc& hw) {
  WorkCompletion wc;
  wc.status = status_of(hw.status);
  wc.qp_num = qpn_;
  const bool ok = wc.status == WcStatus::Success;
  if (hw.wr_id & kRecvBit) {
    const std::uint64_t seq = hw.wr_id & ~kRecvBit;
    const RecvSlot& rslot = recv_slots_[seq % recv_slots_.size()];
    wc.wr_id = rslot.wr_id;
    wc.status = normalized(wc.status, true, rslot.bad_lkey, WcOpcode::Recv);
    wc.opcode = ok && hw.opcode == IBV_WC_RECV_RDMA_WITH_IMM ? WcOpcode::RecvRdmaWithImm : WcOpcode::Recv;
    if (ok) {
      wc.byte_len = hw.byte_len;
      wc.with_imm = (hw.wc_flags & IBV_WC_WITH_IMM) != 0;
      if (wc.with_imm) wc.imm_data = ntohl(hw.imm_data);
    }
    if (!ok && wc.status != WcStatus::WrFlushErr) {
      enter_error(std::string("a receive (wr_id ") + std::to_string(wc.wr_id) + ") completed with " +
                  to_string(wc.status) + " (vendor error " + core::hex(hw.vendor_err) + ")");
    } else if (!ok) {
      enter_error("flushed by the device: the QP went to ERROR");
    }
    if (!recv_cq_.push(wc)) set_error("the receive completion queue overflowed");
    recv_done_.store(seq + 1, std::memory_order_release);
    return;
  }
  const std::uint64_t seq = hw.wr_id;
  const SendSlot& slot = send_slots_[seq % send_slots_.size()];
  wc.wr_id = slot.wr_id;
  wc.opcode = slot.opcode;
  wc.status = normalized(wc.status, false, slot.bad_lkey, slot.opcode);
  if (ok) wc.byte_len = slot.bytes;
  if (!ok && seq < suppress_through_) {
    // A later piece of a split WR whose failure was reported already.
    send_done_.store(seq + 1, std::memory_order_release);
    return;
  }
  if (!ok) {
    suppress_through_ = slot.last_seq + 1;
    std::string why = std::string(to_string(slot.opcode)) + " (wr_id " + std::to_string(slot.wr_id) +
                      ") completed with " + to_string(wc.status) + " (vendor error " + core::hex(hw.vendor_err) + ")";
    if (wc.status == WcStatus::RetryExcErr) {
      why +=
          ": the peer stopped acknowledging (dead process, or a QP that never connected) within the retry "
          "window (RDMX_TIMEOUT)";
    } else if (wc.status == WcStatus::RnrRetryExcErr) {
      why += ": the peer posted no receive within the RNR window (RDMX_RNR_TIMEOUT)";
    } else if (wc.status == WcStatus::RemAccessErr) {
      why += ": the peer refused the access (rkey, bounds or rights)";
    }
    enter_error(why);
  }
  if (!ok || slot.signaled) {
    if (!send_cq_.push(wc)) set_error("the send completion queue overflowed");
  }
  send_done_.store(seq + 1, std::memory_order_release);
}

// Where a driver reports a status IB does not specify for the case, the
// status IB specifies, decided from facts rdmx holds itself:
//  - a local key the registry refused at post time: LOC_PROT_ERR (rxe says
//    LOC_QP_OP_ERR);
//  - rxe (Linux 6.1) answers a SEND longer than the receive with
//    LOC_QP_OP_ERR at the receiver and REM_OP_ERR at the sender, where IB
//    says LOC_LEN_ERR and REM_INV_REQ_ERR. A receive whose keys were valid
//    fails that way only for its length, so the receiver's is exact; the
//    sender's REM_OP_ERR on rxe can also mean the receive's key was bad,
//    which rxe reports the same way: documented in docs/VERBS_PROVIDER.md.
WcStatus VerbsQp::normalized(WcStatus status, bool recv, bool bad_lkey, WcOpcode opcode) const {
  if (status == WcStatus::Success || status == WcStatus::WrFlushErr) return status;
  if (bad_lkey &&
      (status == WcStatus::LocQpOpErr || status == WcStatus::LocProtErr || status == WcStatus::LocAccessErr)) {
    return WcStatus::LocProtErr;
  }
  if (rxe_quirks_ && recv && status == WcStatus::LocQpOpErr) return WcStatus::LocLenErr;
  if (rxe_quirks_ && !recv && status == WcStatus::RemOpErr && opcode == WcOpcode::Send) return WcStatus::RemInvReqErr;
  return status;
}

void VerbsQp::hold_flush(std::uint64_t wr_id, WcOpcode opcode) {
  WorkCompletion wc;
  wc.wr_id = wr_id;
  wc.status = WcStatus::WrFlushErr;
  wc.opcode = opcode;
  wc.qp_num = qpn_;
  {
    core::LockGuard held(held_mutex_);
    (opcode == WcOpcode::Recv ? held_recvs_ : held_sends_).push_back(wc);
  }
  release_held_flushes();
}

void VerbsQp::release_held_flushes() {
  core::LockGuard held(held_mutex_);
  if (!held_sends_.empty() &&
      send_done_.load(std::memory_order_acquire) == send_next_.load(std::memory_order_acquire)) {
    for (const auto& wc : held_sends_) send_cq_.push(wc);
    held_sends_.clear();
  }
  if (!held_recvs_.empty() &&
      recv_done_.load(std::memory_order_acquire) == recv_next_.load(std::memory_order_acquire)) {
    for (const auto& wc : held_recvs_) recv_cq_.push(wc);
    held_recvs_.clear();
  }
}

}  // namespace rdmx::verbs
