// SPDX-License-Identifier: MIT
// The responder of a tcp QP: each request frame's header is admitted (in
// sequence, not interleaved, not discarded after an RNR) and handed to the
// handler of its type, which checks it against the region table and either
// starts placing its payload (SEND, WRITE), queues the answer (READ,
// atomics) or refuses it with a NAK, which fails both QPs as in IB.
#include <array>
#include <atomic>

#include "driver/ordered_placement.hpp"
#include "driver/work_request.hpp"
#include "providers/tcp/tcp_qp.hpp"
#include "services/cuda/copy.hpp"
#include "services/log.hpp"
#include "services/race_annotations.hpp"

namespace rdmx::tcp {
namespace {

// A WRITE's bytes into device memory, the last word last (as
// copy_last_word_last does in host memory); empty, or why it failed.
std::string write_device(char* target, const std::uint8_t* payload, std::size_t length,
                         const core::RegionMemory& memory) {
  try {
    const bool hold = core::has_last_word(reinterpret_cast<std::uint64_t>(target), length);
    const std::size_t body = hold ? length - 8 : length;
    core::cuda::copy_memory(target, payload, body, memory.device, "tcp WRITE into device memory");
    if (hold) core::cuda::copy_memory(target + body, payload + body, 8, memory.device, "tcp WRITE into device memory");
  } catch (const Error& e) {
    return e.message();
  }
  return {};
}

}  // namespace

bool TcpQp::handle_request_locked(const Header& h) {
  static constexpr FrameHandlers kHandlers = frame_handlers({
      {FrameType::AckReq, &TcpQp::on_ack_request_locked},
      {FrameType::SendReq, &TcpQp::on_send_request_locked},
      {FrameType::WriteReq, &TcpQp::on_write_request_locked},
      {FrameType::ReadReq, &TcpQp::on_read_request_locked},
      {FrameType::FetchAddReq, &TcpQp::on_atomic_request_locked},
      {FrameType::CmpSwapReq, &TcpQp::on_atomic_request_locked},
  });
  // An ACK request stands outside the message sequence.
  if (h.type != FrameType::AckReq) {
    const bool first = (h.flags & wire::kFirst) != 0;
    if (rnr_discarding_) {
      if (h.msn != rnr_discard_msn_ || !first) {
        start_discard_locked(h);
        return true;
      }
      rnr_discarding_ = false;  // the retransmission starts here
    }
    if (incoming_.active) return continue_message_locked(h);
    if (h.msn != expected_msn_) {
      protocol_error_locked("request msn " + std::to_string(h.msn) + " out of sequence (expected " +
                            std::to_string(expected_msn_) + ")");
      return false;
    }
  }
  return run_handler_locked(kHandlers, h, "request");
}

bool TcpQp::continue_message_locked(const Header& h) {
  const bool first = (h.flags & wire::kFirst) != 0;
  const bool last = (h.flags & wire::kLast) != 0;
  if (first || h.type != incoming_.type || h.msn != incoming_.msn) {
    protocol_error_locked(std::string(wire::to_string(h.type)) + " msn " + std::to_string(h.msn) +
                          " interleaved into message msn " + std::to_string(incoming_.msn));
    return false;
  }
  if (h.length > incoming_.total - incoming_.done || (last != (incoming_.done + h.length == incoming_.total)) ||
      (((h.flags & wire::kWithImm) != 0) != incoming_.with_imm)) {
    protocol_error_locked("chunk of msn " + std::to_string(h.msn) + " does not fit its message (length " +
                          std::to_string(h.length) + ", " + std::to_string(incoming_.done) + " of " +
                          std::to_string(incoming_.total) + " bytes received)");
    return false;
  }
  if (h.type == FrameType::WriteReq && (h.addr != incoming_.base + incoming_.done || h.rkey != incoming_.rkey)) {
    protocol_error_locked("WRITE chunk of msn " + std::to_string(h.msn) + " is not contiguous with the previous one");
    return false;
  }
  rx_header_ = h;
  rx_target_ = h.type == FrameType::SendReq ? RxTarget::RecvBuffer : RxTarget::RemoteWrite;
  rx_target_offset_ = incoming_.done;
  rx_left_ = h.length;
  rx_in_payload_ = true;
  return true;
}

bool TcpQp::on_ack_request_locked(const Header&) {
  ack_pending_ = true;
  ack_now_ = true;
  return true;
}

bool TcpQp::first_chunk_fits_locked(const Header& h) {
  const bool first = (h.flags & wire::kFirst) != 0;
  const bool last = (h.flags & wire::kLast) != 0;
  if (first && last == (h.length == h.arg0)) return true;
  protocol_error_locked("message msn " + std::to_string(h.msn) + " does not start with a FIRST chunk that fits");
  return false;
}

bool TcpQp::take_receive_locked(const Header& h) {
  if (rq_.empty()) {
    // Receiver not ready: the requester retries from this message after a delay.
    Header nak;
    nak.type = FrameType::Nak;
    nak.msn = h.msn;
    nak.arg0 = static_cast<std::uint64_t>(Syndrome::Rnr);
    queue_control_locked(nak);
    rnr_discarding_ = true;
    rnr_discard_msn_ = h.msn;
    RDMX_TRACE("tcp qp %u: RNR for msn %u from %s (no receive posted)", qpn_, h.msn, peer_text_.c_str());
    start_discard_locked(h);
    return false;
  }
  incoming_.recv = rq_.front();
  incoming_.has_recv = true;
  rq_.pop();
  return true;
}

bool TcpQp::begin_message_locked(const Header& h, bool with_imm) {
  const bool send = h.type == FrameType::SendReq;
  incoming_.active = true;
  incoming_.type = h.type;
  incoming_.msn = h.msn;
  incoming_.total = h.arg0;
  incoming_.done = 0;
  incoming_.base = h.addr;
  incoming_.rkey = h.rkey;
  incoming_.with_imm = with_imm;
  rx_header_ = h;
  rx_target_ = send ? RxTarget::RecvBuffer : RxTarget::RemoteWrite;
  rx_target_offset_ = 0;
  rx_left_ = h.length;
  rx_in_payload_ = true;  // also for 0 bytes: finish_frame completes the message
  return true;
}

bool TcpQp::on_send_request_locked(const Header& h) {
  if (!first_chunk_fits_locked(h)) return false;
  incoming_.has_recv = false;
  if (!take_receive_locked(h)) return true;
  if (h.arg0 > incoming_.recv.capacity) {
    push_recv_completion_locked(incoming_.recv, WcStatus::LocLenErr, WcOpcode::Recv, 0, false, 0);
    incoming_.has_recv = false;
    nak_locked(h.msn, Syndrome::RemInvReq,
               "SEND of " + std::to_string(h.arg0) + " bytes is larger than the posted receive (" +
                   std::to_string(incoming_.recv.capacity) + " bytes, wr_id " + std::to_string(incoming_.recv.wr_id) +
                   ")");
    return false;
  }
  std::array<iovec, kMaxSge> scratch;
  auto& registry = device_.registry();
  core::MemoryRegistry::Reader lock(registry);
  if (gather_locked(incoming_.recv.sges, incoming_.recv.num_sge, 0, h.arg0, scratch.data(), &lock) < 0) {
    lock.unlock();
    push_recv_completion_locked(incoming_.recv, WcStatus::LocProtErr, WcOpcode::Recv, 0, false, 0);
    incoming_.has_recv = false;
    nak_locked(h.msn, Syndrome::RemOp,
               "posted receive wr_id " + std::to_string(incoming_.recv.wr_id) +
                   " has an SGE that is not registered for local write");
    return false;
  }
  return begin_message_locked(h, (h.flags & wire::kWithImm) != 0);
}

bool TcpQp::on_write_request_locked(const Header& h) {
  if (!first_chunk_fits_locked(h)) return false;
  const bool imm = (h.flags & wire::kWithImm) != 0;
  const bool last = (h.flags & wire::kLast) != 0;
  auto& registry = device_.registry();
  auto refuse = [&](core::AccessCheck verdict) RDMX_REQUIRES(this) {
    nak_locked(h.msn, Syndrome::RemAccess,
               "RDMA WRITE to " + hex(h.addr) + " length " + std::to_string(h.arg0) + " rkey " + hex(h.rkey) + ": " +
                   core::to_string(verdict));
    return false;
  };
  if (!imm && last && h.length > 0 && rx_end_ - rx_begin_ >= h.length) {
    // A small WRITE already in the read-ahead buffer: check and copy under one lock.
    const std::uint8_t* payload = rx_buf_.data() + rx_begin_;
    std::string device_failure;
    core::WakeWords* doorbell = nullptr;
    auto verdict = registry.with_access_in(true, &pd_, h.rkey, h.addr, h.length, Access::RemoteWrite,
                                           [&](char* p, const core::RegionMemory& memory) {
                                             doorbell = memory.doorbell;
                                             if (memory.type == MemoryType::Host) {
                                               core::copy_last_word_last(p, payload, h.length);
                                             } else {
                                               device_failure = write_device(p, payload, h.length, memory);
                                             }
                                           });
    if (verdict != core::AccessCheck::Ok) return refuse(verdict);
    if (!device_failure.empty()) {
      nak_locked(h.msn, Syndrome::RemOp, "RDMA WRITE to device memory at " + hex(h.addr) + ": " + device_failure);
      return false;
    }
    if (doorbell != nullptr) core::ring(*doorbell);
    rx_begin_ += h.length;
    request_executed_locked(h.flags);
    return true;
  }
  auto verdict = registry.check(true, &pd_, h.rkey, h.addr, h.arg0, Access::RemoteWrite);
  if (verdict != core::AccessCheck::Ok) return refuse(verdict);
  incoming_.has_recv = false;
  if (imm && !take_receive_locked(h)) return true;
  return begin_message_locked(h, imm);
}

bool TcpQp::on_read_request_locked(const Header& h) {
  auto verdict = device_.registry().check(true, &pd_, h.rkey, h.addr, h.arg0, Access::RemoteRead);
  if (verdict != core::AccessCheck::Ok) {
    nak_locked(h.msn, Syndrome::RemAccess,
               "RDMA READ of " + hex(h.addr) + " length " + std::to_string(h.arg0) + " rkey " + hex(h.rkey) + ": " +
                   core::to_string(verdict));
    return false;
  }
  read_jobs_.push_back(ReadJob{h.msn, h.addr, h.rkey, h.arg0, 0});
  ++expected_msn_;
  ack_pending_ = true;
  return true;
}

bool TcpQp::on_atomic_request_locked(const Header& h) {
  if (h.addr % 8 != 0) {
    nak_locked(h.msn, Syndrome::RemInvReq, "atomic target " + hex(h.addr) + " is not 8-byte aligned");
    return false;
  }
  std::uint64_t original = 0;
  std::string device_failure;
  auto verdict = device_.registry().with_access_in(
      true, &pd_, h.rkey, h.addr, 8, Access::RemoteAtomic, [&](char* p, const core::RegionMemory& memory) {
        if (memory.type != MemoryType::Host) {
          // Read, changed and written back under the region table's lock:
          // atomic against rdmx's own accesses, not against the GPU's kernels.
          try {
            core::cuda::copy_memory(&original, p, 8, memory.device, "tcp atomic on device memory");
            const bool change = h.type == FrameType::FetchAddReq || original == h.arg0;
            const std::uint64_t value = h.type == FrameType::FetchAddReq ? original + h.arg0 : h.arg1;
            if (change) core::cuda::copy_memory(p, &value, 8, memory.device, "tcp atomic on device memory");
          } catch (const Error& e) {
            device_failure = e.message();
          }
          return;
        }
        // Hardware atomics: atomic against every other atomic on this host, whichever QP or process issued it.
        std::atomic_ref<std::uint64_t> target(*reinterpret_cast<std::uint64_t*>(p));
        if (h.type == FrameType::FetchAddReq) {
          original = target.fetch_add(h.arg0);
        } else {
          std::uint64_t expected = h.arg0;
          target.compare_exchange_strong(expected, h.arg1);
          original = expected;
        }
      });
  if (!device_failure.empty()) {
    nak_locked(h.msn, Syndrome::RemOp, "atomic on device memory at " + hex(h.addr) + ": " + device_failure);
    return false;
  }
  if (verdict != core::AccessCheck::Ok) {
    nak_locked(h.msn, Syndrome::RemAccess,
               "atomic on " + hex(h.addr) + " rkey " + hex(h.rkey) + ": " + core::to_string(verdict));
    return false;
  }
  Header resp;
  resp.type = FrameType::AtomicResp;
  resp.msn = h.msn;
  resp.arg0 = original;
  ++expected_msn_;
  queue_control_locked(resp);
  return true;
}

void TcpQp::request_executed_locked(std::uint16_t flags) {
  core::release_remote_placements();  // before anything can acknowledge it
  ++expected_msn_;
  ack_pending_ = true;
  if (flags & wire::kAckNow) ack_now_ = true;
}

void TcpQp::nak_locked(std::uint32_t msn, Syndrome syndrome, const std::string& why) {
  Header nak;
  nak.type = FrameType::Nak;
  nak.msn = msn;
  nak.arg0 = static_cast<std::uint64_t>(syndrome);
  control_.push_front(nak);
  // As in IB, the responder's QP fails too; the NAK is flushed before the socket closes.
  fail_locked("refused request msn " + std::to_string(msn) + " from " + peer_text_ + ": " + why, WcStatus::WrFlushErr);
}

}  // namespace rdmx::tcp
