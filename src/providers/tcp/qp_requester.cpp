// SPDX-License-Identifier: MIT
// The requester of a tcp QP: work requests become frames in MSN order (large
// messages as 256 KiB chunks, READ answers interleaved with our requests),
// written without blocking; the answers that come back (acknowledgements,
// READ data, atomic results, NAKs) complete them in order.
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "driver/work_request.hpp"
#include "providers/tcp/tcp_qp.hpp"
#include "services/cuda/copy.hpp"
#include "services/log.hpp"
#include "services/race_annotations.hpp"

namespace rdmx::tcp {

using core::carries_payload;
using core::is_atomic;
using core::msn_before;

namespace {

constexpr auto kRnrRetryDelay = std::chrono::milliseconds(1);

WcStatus status_for(Syndrome s) {
  switch (s) {
    case Syndrome::RemAccess: return WcStatus::RemAccessErr;
    case Syndrome::RemInvReq: return WcStatus::RemInvReqErr;
    case Syndrome::RemOp: return WcStatus::RemOpErr;
    case Syndrome::Rnr: return WcStatus::RnrRetryExcErr;
  }
  return WcStatus::GeneralErr;
}

// The hot-path socket call goes straight to the kernel: libc's wrapper is a
// thread-cancellation point that adds bookkeeping to every call, and rdmx
// never cancels threads.
inline ssize_t fast_send(int fd, const void* buffer, std::size_t length) {
  return syscall(SYS_sendto, fd, buffer, length, MSG_NOSIGNAL | MSG_DONTWAIT, nullptr, 0);
}

}  // namespace

bool TcpQp::send_small_now_locked(const SendEntry& e) {
  // The latency path: a small SEND or WRITE with nothing queued ahead of it
  // goes out in one send() without the general frame builder. Anything else
  // falls back to pump_locked().
  if (tx_.active || !control_.empty() || !read_jobs_.empty() || rnr_paused_ || tx_msn_ != e.msn || tx_offset_ != 0 ||
      e.awaiting_staging || e.device_payload || !carries_payload(e.opcode) ||
      e.total > sizeof(tx_.header) - wire::kHeaderSize) {
    return false;
  }
  const bool send = e.opcode == Opcode::Send || e.opcode == Opcode::SendWithImm;
  const bool imm = e.opcode == Opcode::SendWithImm || e.opcode == Opcode::RdmaWriteWithImm;
  Header h;
  h.type = send ? FrameType::SendReq : FrameType::WriteReq;
  h.flags = wire::kFirst | wire::kLast | (imm ? wire::kWithImm : 0);
  if (e.signaled || sq_.size() * 2 >= sq_.capacity()) h.flags |= wire::kAckNow;
  h.msn = e.msn;
  h.length = static_cast<std::uint32_t>(e.total);
  h.arg0 = e.total;
  h.arg1 = imm ? e.imm : 0;
  if (!send) {
    h.rkey = e.rkey;
    h.addr = e.remote_addr;
  }
  finish_header_locked(h);
  wire::encode(h, tx_.header);
  std::size_t at = wire::kHeaderSize;
  for (std::uint32_t i = 0; i < e.num_sge; ++i) {
    std::memcpy(tx_.header + at, reinterpret_cast<const void*>(e.sges[i].addr), e.sges[i].length);
    at += e.sges[i].length;
  }
  ++tx_msn_;
  if (!msn_before(e.msn, sent_msn_high_)) sent_msn_high_ = e.msn + 1;
  tx_.iov[0] = {tx_.header, at};
  tx_.iov_count = 1;
  tx_.first_iov = 0;
  tx_.left = at;
  tx_.remote_source = false;
  tx_.active = true;
  // A socket that takes only part of it leaves the rest to EPOLLOUT, as pump_locked() does.
  if (!write_frame_locked() && fd_ >= 0) set_want_write_locked(true);
  return true;
}

void TcpQp::queue_control_locked(Header header) { control_.push_back(header); }

void TcpQp::finish_header_locked(Header& h) {
  if (h.type == FrameType::Hello) return;
  h.flags |= wire::kAckValid;
  h.ack_msn = expected_msn_;
  ack_pending_ = false;
  ack_now_ = false;
}

int TcpQp::gather_locked(const std::array<Sge, kMaxSge>& sges, std::uint32_t num_sge, std::uint64_t offset,
                         std::uint64_t length, iovec* iov, const core::MemoryRegistry::Reader* writable) {
  int count = 0;
  for (std::uint32_t i = 0; i < num_sge && length > 0; ++i) {
    const Sge& sge = sges[i];
    if (offset >= sge.length) {
      offset -= sge.length;
      continue;
    }
    std::uint64_t take = std::min<std::uint64_t>(sge.length - offset, length);
    if (writable != nullptr &&
        writable->check(false, &pd_, sge.lkey, sge.addr + offset, take, Access::LocalWrite) != core::AccessCheck::Ok) {
      return -1;
    }
    iov[count].iov_base = reinterpret_cast<void*>(sge.addr + offset);
    iov[count].iov_len = take;
    ++count;
    length -= take;
    offset = 0;
  }
  return count;
}

bool TcpQp::copy_device_payload_locked(const SendEntry& e, std::uint64_t offset, std::uint32_t length) {
  // Copied just before the piece is sent: the socket still carries the
  // piece before while the GPU copies this one.
  if (!device_payload_) device_payload_ = core::cuda::PinnedBuffer(wire::kMaxFrame);
  std::uint64_t at = 0;
  for (std::uint32_t i = 0; i < e.num_sge && at < length; ++i) {
    const Sge& sge = e.sges[i];
    if (offset >= sge.length) {
      offset -= sge.length;
      continue;
    }
    const std::uint64_t take = std::min<std::uint64_t>(sge.length - offset, length - at);
    std::string failure;
    const auto verdict = device_.registry().with_access_in(
        false, &pd_, sge.lkey, sge.addr + offset, take, Access::None, [&](char* p, const core::RegionMemory& memory) {
          held_by_caller();
          if (memory.type == MemoryType::Host) {
            std::memcpy(device_payload_.data() + at, p, take);
            return;
          }
          try {
            device_payload_.pin(memory.device);
            core::cuda::copy_memory(device_payload_.data() + at, p, take, memory.device,
                                    "tcp payload from device memory");
          } catch (const Error& error) {
            failure = error.message();
          }
        });
    const std::string what = std::string(to_string(e.opcode)) + " wr_id " + std::to_string(e.wr_id) + ": local SGE " +
                             std::to_string(i) + " (lkey " + std::to_string(sge.lkey) + ")";
    if (verdict != core::AccessCheck::Ok) {
      fail_locked(what + " was deregistered while it was being sent: " + to_string(verdict), WcStatus::LocProtErr,
                  e.msn);
      return false;
    }
    if (!failure.empty()) {
      fail_locked(what + ": copying the payload out of device memory failed: " + failure, WcStatus::LocProtErr, e.msn);
      return false;
    }
    at += take;
    offset = 0;
  }
  tx_.iov[1] = {device_payload_.data(), length};
  tx_.iov_count = 2;
  return true;
}

bool TcpQp::stage_device_source_locked(const ReadJob& job, std::uint32_t chunk) {
  // A READ answer from device memory is copied to a host buffer first; the
  // frame is still re-checked against the registry while it is sent.
  std::string failure;
  auto verdict = device_.registry().with_access_in(true, &pd_, job.rkey, job.addr + job.offset, chunk,
                                                   Access::RemoteRead, [&](char* p, const core::RegionMemory& memory) {
                                                     held_by_caller();
                                                     if (memory.type == MemoryType::Host) return;
                                                     try {
                                                       core::cuda::copy_memory(
                                                           device_source_.ready(wire::kMaxFrame, memory.device), p,
                                                           chunk, memory.device, "tcp READ from device memory");
                                                       tx_.iov[1].iov_base = device_source_.data();
                                                     } catch (const Error& e) {
                                                       failure = e.message();
                                                     }
                                                   });
  if (verdict != core::AccessCheck::Ok) {
    fail_locked("memory region deregistered while serving a READ for " + peer_text_, WcStatus::WrFlushErr);
    return false;
  }
  if (!failure.empty()) {
    fail_locked("serving a READ from device memory for " + peer_text_ + ": " + failure, WcStatus::WrFlushErr);
    return false;
  }
  return true;
}

bool TcpQp::build_frame_locked() {
  Header h;
  tx_.remote_source = false;
  tx_.iov_count = 1;
  std::uint64_t payload = 0;
  while (!control_.empty()) {
    h = control_.front();
    control_.pop_front();
    // A standalone ACK is redundant once another frame carried the
    // acknowledgement, or when another frame is about to.
    if (h.type == FrameType::Ack && (!ack_pending_ || !control_.empty() || has_data_frames_locked())) continue;
    goto ready;
  }
  {
    const bool can_read = !read_jobs_.empty();
    const bool can_request = requests_to_send_locked();
    if (!can_read && !can_request) return false;
    const bool serve_read = can_read && (!can_request || serve_reads_next_);
    serve_reads_next_ = !serve_read;
    if (serve_read) {
      ReadJob& job = read_jobs_.front();
      const std::uint32_t chunk = wire::frame_length(job.total, job.offset);
      h.type = FrameType::ReadResp;
      h.msn = job.msn;
      h.length = chunk;
      h.arg1 = job.offset;
      if (job.offset == 0) h.flags |= wire::kFirst;
      if (job.offset + chunk == job.total) h.flags |= wire::kLast;
      if (chunk > 0) {
        tx_.iov[1] = {reinterpret_cast<void*>(job.addr + job.offset), chunk};
        tx_.iov_count = 2;
        tx_.remote_source = true;
        tx_.rkey = job.rkey;
        tx_.addr = job.addr + job.offset;
        tx_.length = chunk;
        if (!stage_device_source_locked(job, chunk)) return false;
      }
      payload = chunk;
      job.offset += chunk;
      if (job.offset == job.total) read_jobs_.pop_front();
    } else {
      SendEntry& e = *entry_for_msn_locked(tx_msn_);
      h.msn = e.msn;
      h.rkey = e.rkey;
      switch (e.opcode) {
        case Opcode::Send:
        case Opcode::SendWithImm:
        case Opcode::RdmaWrite:
        case Opcode::RdmaWriteWithImm: {
          const bool send = e.opcode == Opcode::Send || e.opcode == Opcode::SendWithImm;
          const bool imm = e.opcode == Opcode::SendWithImm || e.opcode == Opcode::RdmaWriteWithImm;
          const std::uint32_t chunk = wire::frame_length(e.total, tx_offset_);
          h.type = send ? FrameType::SendReq : FrameType::WriteReq;
          h.length = chunk;
          if (send)
            h.rkey = 0;
          else
            h.addr = e.remote_addr + tx_offset_;
          if (tx_offset_ == 0) {
            h.flags |= wire::kFirst;
            h.arg0 = e.total;
          }
          const bool last = tx_offset_ + chunk == e.total;
          if (imm) h.flags |= wire::kWithImm;
          if (last) {
            h.flags |= wire::kLast;
            if (imm) h.arg1 = e.imm;
            if (e.signaled || sq_.size() * 2 >= sq_.capacity()) h.flags |= wire::kAckNow;
          }
          if (e.device_payload) {
            if (!copy_device_payload_locked(e, tx_offset_, chunk)) return false;
          } else {
            tx_.iov_count = 1 + gather_locked(e.sges, e.num_sge, tx_offset_, chunk, &tx_.iov[1], nullptr);
          }
          payload = chunk;
          tx_offset_ += chunk;
          if (last) {
            tx_offset_ = 0;
            ++tx_msn_;
          }
          break;
        }
        case Opcode::RdmaRead:
          h.type = FrameType::ReadReq;
          h.addr = e.remote_addr;
          h.arg0 = e.total;
          ++tx_msn_;
          break;
        case Opcode::AtomicFetchAdd:
        case Opcode::AtomicCmpSwap:
          h.type = e.opcode == Opcode::AtomicFetchAdd ? FrameType::FetchAddReq : FrameType::CmpSwapReq;
          h.addr = e.remote_addr;
          h.arg0 = e.compare_add;
          h.arg1 = e.opcode == Opcode::AtomicCmpSwap ? e.swap : 0;
          ++tx_msn_;
          break;
      }
      // A NAK may come back after the first chunk of a message, so a message counts as sent once it starts.
      if (!msn_before(h.msn, sent_msn_high_)) sent_msn_high_ = h.msn + 1;
    }
  }
ready:
  finish_header_locked(h);
  wire::encode(h, tx_.header);
  tx_.iov[0] = {tx_.header, wire::kHeaderSize};
  if (!tx_.remote_source && payload > 0 && payload <= sizeof(tx_.header) - wire::kHeaderSize) {
    // Small payload: one contiguous buffer is cheaper for the kernel than an iovec list.
    std::size_t at = wire::kHeaderSize;
    for (int i = 1; i < tx_.iov_count; ++i) {
      std::memcpy(tx_.header + at, tx_.iov[i].iov_base, tx_.iov[i].iov_len);
      at += tx_.iov[i].iov_len;
    }
    tx_.iov[0].iov_len = at;
    tx_.iov_count = 1;
  }
  tx_.first_iov = 0;
  tx_.left = wire::kHeaderSize + payload;
  tx_.active = true;
  return true;
}

bool TcpQp::write_frame_locked() {
  while (tx_.left > 0) {
    msghdr msg{};
    msg.msg_iov = &tx_.iov[tx_.first_iov];
    msg.msg_iovlen = static_cast<std::size_t>(tx_.iov_count - tx_.first_iov);
    ssize_t n = -1;
    if (tx_.remote_source) {
      // A READ response reads the target's registered memory: only while the region is still registered.
      const int fd = fd_;
      auto verdict =
          device_.registry().with_access(true, &pd_, tx_.rkey, tx_.addr, tx_.length, Access::RemoteRead,
                                         [&](char*) { n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT); });
      if (verdict != core::AccessCheck::Ok) {
        fail_locked("memory region deregistered while serving a READ for " + peer_text_, WcStatus::WrFlushErr);
        return false;
      }
    } else if (msg.msg_iovlen == 1) {
      // One piece (header with a small payload): send() skips the iovec import.
      n = fast_send(fd_, msg.msg_iov[0].iov_base, msg.msg_iov[0].iov_len);
    } else {
      n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        tx_blocked_ = true;
        return false;
      }
      fail_locked("send to " + peer_text_ + " failed: " + std::strerror(errno), WcStatus::RetryExcErr);
      return false;
    }
    // What the kernel copied out of this rank's buffers was read before the
    // peer can learn of it and have anything placed into them.
    core::release_remote_placements();
    auto sent = static_cast<std::size_t>(n);
    tx_.left -= sent;
    while (sent > 0) {
      iovec& v = tx_.iov[tx_.first_iov];
      if (sent >= v.iov_len) {
        sent -= v.iov_len;
        ++tx_.first_iov;
      } else {
        v.iov_base = static_cast<char*>(v.iov_base) + sent;
        v.iov_len -= sent;
        if (tx_.remote_source) {
          tx_.addr += sent;
          tx_.length -= sent;
        }
        sent = 0;
      }
    }
    if (tx_.remote_source && tx_.first_iov >= 1) {
      // The header is gone; keep the re-check window equal to what is left of the payload.
      std::uint64_t left_payload = tx_.left;
      tx_.addr += tx_.length - left_payload;
      tx_.length = left_payload;
    }
  }
  tx_.active = false;
  return true;
}

bool TcpQp::requests_to_send_locked() {
  return !rnr_paused_ && msn_before(tx_msn_, next_msn_) && ready_to_send_locked(*entry_for_msn_locked(tx_msn_));
}
bool TcpQp::has_data_frames_locked() { return !read_jobs_.empty() || requests_to_send_locked(); }

void TcpQp::pump_locked(int frame_budget) {
  if (fd_ < 0 || !established_) return;
  for (int i = 0; i < frame_budget; ++i) {
    if (!tx_.active && !build_frame_locked()) {
      set_want_write_locked(false);
      return;
    }
    if (!write_frame_locked()) {
      if (fd_ >= 0) set_want_write_locked(true);
      return;
    }
  }
  // Budget spent: the engine comes back through EPOLLOUT, after serving other QPs.
  set_want_write_locked(true);
}

// ---------------------------------------------------------------------------
// Answers.

bool TcpQp::handle_response_locked(const Header& h) {
  static constexpr FrameHandlers kHandlers = frame_handlers({
      {FrameType::Bye, &TcpQp::on_bye_locked},
      {FrameType::Ack, &TcpQp::on_ack_locked},
      {FrameType::ReadResp, &TcpQp::on_read_response_locked},
      {FrameType::AtomicResp, &TcpQp::on_atomic_response_locked},
      {FrameType::Nak, &TcpQp::on_nak_locked},
  });
  return run_handler_locked(kHandlers, h, "response");
}

bool TcpQp::on_bye_locked(const Header&) {
  peer_said_bye_ = true;
  return true;
}

bool TcpQp::on_ack_locked(const Header& h) {
  if (h.flags & wire::kAckValid) return true;
  protocol_error_locked("ACK without an acknowledged MSN");
  return false;
}

bool TcpQp::on_read_response_locked(const Header& h) {
  SendEntry* e = entry_for_msn_locked(h.msn);
  if (e == nullptr || e->opcode != Opcode::RdmaRead || e->response_done || !msn_before(h.msn, sent_msn_high_)) {
    protocol_error_locked("READ response for msn " + std::to_string(h.msn) + " that is not an outstanding READ");
    return false;
  }
  const bool last = (h.flags & wire::kLast) != 0;
  if (h.arg1 != e->response_bytes || h.length > e->total - e->response_bytes ||
      last != (e->response_bytes + h.length == e->total)) {
    protocol_error_locked("READ response chunk for msn " + std::to_string(h.msn) + " does not fit (offset " +
                          std::to_string(h.arg1) + ", length " + std::to_string(h.length) + ", READ of " +
                          std::to_string(e->total) + " bytes)");
    return false;
  }
  rx_header_ = h;
  rx_target_ = RxTarget::ReadResult;
  rx_target_offset_ = e->response_bytes;
  rx_left_ = h.length;
  rx_in_payload_ = true;
  return true;
}

bool TcpQp::on_atomic_response_locked(const Header& h) {
  SendEntry* e = entry_for_msn_locked(h.msn);
  if (e == nullptr || !is_atomic(e->opcode) || e->response_done || !msn_before(h.msn, sent_msn_high_)) {
    protocol_error_locked("atomic response for msn " + std::to_string(h.msn) + " that is not an outstanding atomic");
    return false;
  }
  const Sge& sge = e->sges[0];
  auto verdict = device_.registry().with_access(false, &pd_, sge.lkey, sge.addr, 8, Access::LocalWrite,
                                                [&](char* p) { std::memcpy(p, &h.arg0, 8); });
  if (verdict != core::AccessCheck::Ok) {
    fail_locked("atomic result buffer " + hex(sge.addr) + " lkey " + hex(sge.lkey) + ": " + core::to_string(verdict),
                WcStatus::LocProtErr, e->msn);
    return false;
  }
  e->response_done = true;
  complete_in_order_locked();
  return true;
}

bool TcpQp::on_nak_locked(const Header& h) {
  SendEntry* e = entry_for_msn_locked(h.msn);
  if (e == nullptr || !msn_before(h.msn, sent_msn_high_)) {
    protocol_error_locked("NAK for msn " + std::to_string(h.msn) + " that is not outstanding");
    return false;
  }
  auto syndrome = static_cast<Syndrome>(h.arg0);
  if (syndrome != Syndrome::Rnr) {
    fail_locked("peer " + peer_text_ + " refused " + std::string(to_string(e->opcode)) + " wr_id " +
                    std::to_string(e->wr_id) + " (" + to_string(status_for(syndrome)) + ")",
                status_for(syndrome), e->msn);
    return false;
  }
  if (!core::consumes_receive(e->opcode)) {
    protocol_error_locked("RNR NAK for a request that consumes no receive");
    return false;
  }
  auto now = core::Clock::now();
  if (!e->rnr_seen) note_rnr_locked(*e, now);
  if (now - e->first_rnr > rnr_timeout_) {
    fail_locked("peer " + peer_text_ + " had no receive posted for " + std::string(to_string(e->opcode)) + " wr_id " +
                    std::to_string(e->wr_id) + " within the RNR timeout (" + std::to_string(rnr_timeout_.count()) +
                    " ms)",
                WcStatus::RnrRetryExcErr, e->msn);
    return false;
  }
  rnr_paused_ = true;
  rnr_msn_ = h.msn;
  rnr_resume_at_ = now + kRnrRetryDelay;
  return true;
}

void TcpQp::process_ack_locked(std::uint32_t ack_msn) {
  if (msn_before(sent_msn_high_, ack_msn)) {
    protocol_error_locked("acknowledgement of msn " + std::to_string(ack_msn) + " which was never sent (sent up to " +
                          std::to_string(sent_msn_high_) + ")");
    return;
  }
  if (msn_before(acked_msn_, ack_msn)) {
    acked_msn_ = ack_msn;
    complete_in_order_locked();
  }
}

core::SendEntry* TcpQp::entry_for_msn_locked(std::uint32_t msn) {
  return SoftRcQp::entry_for_msn_locked(msn, sq_.size());
}

void TcpQp::complete_in_order_locked() { complete_done_locked(sq_.size()); }

}  // namespace rdmx::tcp
