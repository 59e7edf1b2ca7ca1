// SPDX-License-Identifier: MIT
// How a tcp QP receives: frame headers come through a small read-ahead
// buffer, large payloads straight from the socket into their destination
// (the registered region of a WRITE, the receive of a SEND, the buffer of a
// READ), each piece re-checked against the region table as it lands.
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "driver/ordered_placement.hpp"
#include "driver/work_request.hpp"
#include "providers/tcp/tcp_qp.hpp"
#include "services/cuda/copy.hpp"
#include "services/race_annotations.hpp"

namespace rdmx::tcp {

namespace {

constexpr std::uint64_t kLargeFrame = 1024;

bool is_request(FrameType t) {
  return t == FrameType::SendReq || t == FrameType::WriteReq || t == FrameType::ReadReq ||
         t == FrameType::FetchAddReq || t == FrameType::CmpSwapReq || t == FrameType::AckReq;
}

// The hot-path socket call goes straight to the kernel (see fast_send).
inline ssize_t fast_recv(int fd, void* buffer, std::size_t length) {
  return syscall(SYS_recvfrom, fd, buffer, length, MSG_DONTWAIT, nullptr, nullptr);
}

}  // namespace

std::uint8_t* discard_buffer() {
  static thread_local std::array<std::uint8_t, kDiscardBuffer> buffer;
  return buffer.data();
}

bool TcpQp::fill_read_ahead_locked() {
  if (rx_begin_ > 0) {
    std::memmove(rx_buf_.data(), rx_buf_.data() + rx_begin_, rx_end_ - rx_begin_);
    rx_end_ -= rx_begin_;
    rx_begin_ = 0;
  }
  // After a large frame, read only the next header so the next payload lands directly in place.
  std::size_t want = last_frame_large_ ? wire::kHeaderSize - rx_end_ : kReadAhead - rx_end_;
  for (;;) {
    ssize_t n = fast_recv(fd_, rx_buf_.data() + rx_end_, want);
    if (n > 0) {
      // A short read means the socket was empty: skip the recv() that would only say EAGAIN.
      rx_drained_ = static_cast<std::size_t>(n) < want;
      rx_end_ += static_cast<std::size_t>(n);
      rx_seen_ = true;
      ack_request_sent_ = false;
      return true;
    }
    if (n == 0) {
      fail_locked(peer_said_bye_ ? "connection closed by " + peer_text_ + ": it destroyed its QP"
                                 : "connection closed by " + peer_text_ +
                                       " without a goodbye (its process exited, was killed, or its QP failed)",
                  WcStatus::RetryExcErr);
      return false;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
    fail_locked("receive from " + peer_text_ + " failed: " + std::strerror(errno), WcStatus::RetryExcErr);
    return false;
  }
}

bool TcpQp::receive_locked(int frame_budget) {
  bool did = false;
  rx_drained_ = false;  // the caller saw the socket readable: a short read only counts within this call
  int frames = 0;
  while (live_locked() && frames < frame_budget) {
    if (!rx_in_payload_) {
      if (rx_end_ - rx_begin_ < wire::kHeaderSize) {
        if (rx_drained_) break;  // level-triggered epoll and poll() report the socket again if more arrives
        if (!fill_read_ahead_locked()) break;
        did = true;
        continue;
      }
      Header h = wire::decode(rx_buf_.data() + rx_begin_);
      rx_begin_ += wire::kHeaderSize;
      ++frames;
      did = true;
      if (!dispatch_header_locked(h)) break;
      if (!rx_in_payload_) continue;
    }
    if (!consume_payload_locked()) break;
  }
  if (live_locked()) {
    bool only_ack = false;
    if (ack_now_) {
      Header ack;
      ack.type = FrameType::Ack;
      // Only an application thread can be about to reply; the engine thread acknowledges at once.
      device_.lock_held(device_lock_);
      only_ack = device_.in_application_pass_locked() && control_.empty() && !tx_.active && !has_data_frames_locked();
      queue_control_locked(ack);
    }
    // A full socket is retried when epoll reports room, not on every poll:
    // failing sends contend for the socket lock with the peer's ACKs.
    if (tx_blocked_) {
      // nothing: EPOLLOUT resumes sending
    } else if (only_ack) {
      // Give the application one pass to answer: its reply then carries the
      // acknowledgement and the standalone ACK is never sent (ping-pong p99).
      set_want_write_locked(true);
    } else if (tx_.active || !control_.empty() || has_data_frames_locked() || want_write_) {
      pump_locked(8);
    }
  }
  return did;
}

bool TcpQp::dispatch_header_locked(const Header& h) {
  core::acquire_remote_placements();  // what the application did with the target before it let the peer in
  if (const char* bad = wire::validate(h)) {
    protocol_error_locked(std::string(bad) + " (frame type " + std::to_string(static_cast<int>(h.type)) + ")");
    return false;
  }
  last_frame_large_ = h.length >= kLargeFrame;
  if (h.flags & wire::kAckValid) {
    process_ack_locked(h.ack_msn);
    if (!live_locked()) return false;
  }
  if (h.type == FrameType::Refused) {
    fail_locked(peer_text_ +
                    " refused this connection: the proof of the job secret did not verify (RDMX_AUTH_KEY or "
                    "RDMX_AUTH_KEY_FILE differs between the ranks, or this one has none)",
                WcStatus::RetryExcErr);
    return false;
  }
  if (h.type == FrameType::Hello || h.type == FrameType::Challenge || h.type == FrameType::Accept) {
    protocol_error_locked(std::string(wire::to_string(h.type)) + " on an established connection");
    return false;
  }
  bool ok = is_request(h.type) ? handle_request_locked(h) : handle_response_locked(h);
  return ok && live_locked();
}

bool TcpQp::run_handler_locked(const FrameHandlers& handlers, const Header& h, const char* kind) {
  const FrameHandler handler = handlers[static_cast<std::size_t>(h.type) % handlers.size()];
  if (handler == nullptr) {
    protocol_error_locked(std::string("unexpected ") + kind + " type");
    return false;
  }
  return (this->*handler)(h);
}

void TcpQp::start_discard_locked(const Header& h) {
  rx_header_ = h;
  rx_target_ = RxTarget::Discard;
  rx_target_offset_ = 0;
  rx_left_ = h.length;
  rx_in_payload_ = h.length > 0;
}

bool TcpQp::consume_payload_locked() {
  while (rx_left_ > 0) {
    std::size_t avail = rx_end_ - rx_begin_;
    std::size_t n;
    if (avail > 0) {
      n = std::min<std::size_t>(avail, rx_left_);
      if (deliver_locked(rx_buf_.data() + rx_begin_, n) != n) return false;
      rx_begin_ += n;
    } else {
      n = deliver_locked(nullptr, rx_left_);
      if (n == 0) return false;
    }
    rx_left_ -= static_cast<std::uint32_t>(n);
    rx_target_offset_ += n;
  }
  finish_frame_locked();
  return live_locked();
}

std::size_t TcpQp::deliver_locked(const std::uint8_t* from, std::size_t n) {
  // Either copy `n` read-ahead bytes from `from`, or receive up to `n` bytes
  // from the socket straight into the destination.
  std::array<iovec, kMaxSge + 1> iov;  // + the read-ahead buffer
  int count = 0;
  ssize_t got = -1;
  auto land = [&]() RDMX_REQUIRES(this) {
    if (from != nullptr) {
      std::size_t off = 0;
      for (int i = 0; i < count; ++i) {
        std::memcpy(iov[i].iov_base, from + off, iov[i].iov_len);
        off += iov[i].iov_len;
      }
      got = static_cast<ssize_t>(n);
      return;
    }
    // Reading the rest of a frame: let the same call bring the next header
    // into the (empty) read-ahead buffer, saving a system call per frame.
    std::size_t in_place = 0;
    for (int i = 0; i < count; ++i) in_place += iov[i].iov_len;
    int total = count;
    if (in_place == rx_left_ && rx_begin_ == rx_end_) {
      rx_begin_ = rx_end_ = 0;
      iov[total++] = {rx_buf_.data(), wire::kHeaderSize};
    }
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = static_cast<std::size_t>(total);
    do {
      got = ::recvmsg(fd_, &msg, MSG_DONTWAIT);
    } while (got < 0 && errno == EINTR);
    if (got > 0 && static_cast<std::size_t>(got) > in_place) {
      rx_end_ = static_cast<std::size_t>(got) - in_place;
      got = static_cast<ssize_t>(in_place);
    }
  };
  auto& registry = device_.registry();
  switch (rx_target_) {
    case RxTarget::Discard:
      if (from != nullptr) return n;
      iov[0] = {discard_buffer(), std::min<std::size_t>(n, kDiscardBuffer)};
      count = 1;
      land();
      break;
    case RxTarget::RemoteWrite: {
      // The message's last word is received aside and stored after the rest
      // (DeviceCaps::ordered_write_placement), whatever frames carry it.
      const std::uint64_t addr = incoming_.base + rx_target_offset_;
      const std::uint64_t total = incoming_.total;
      const bool hold = core::has_last_word(incoming_.base, total);
      const std::uint64_t before_tail = hold ? total - 8 : total;
      const std::uint64_t off = rx_target_offset_;
      const std::size_t direct =
          off < before_tail ? static_cast<std::size_t>(std::min<std::uint64_t>(n, before_tail - off)) : 0;
      // Device memory: the bytes land in a host buffer and go on through the driver.
      std::string device_failure;
      core::WakeWords* doorbell = nullptr;
      auto verdict = registry.with_access_in(
          true, &pd_, incoming_.rkey, addr, n, Access::RemoteWrite, [&](char* p, const core::RegionMemory& memory) {
            held_by_caller();
            doorbell = memory.doorbell;
            const bool device = memory.type != MemoryType::Host;
            char* landing = device ? device_landing_.ready(wire::kMaxFrame, memory.device) : p;
            count = 0;
            if (direct > 0) iov[static_cast<std::size_t>(count++)] = {landing, direct};
            if (direct < n)
              iov[static_cast<std::size_t>(count++)] = {tail_hold_ + (off + direct - before_tail), n - direct};
            land();
            if (device && got > 0) {
              try {
                core::cuda::copy_memory(p, device_landing_.data(), std::min<std::size_t>(direct, got), memory.device,
                                        "tcp WRITE into device memory");
              } catch (const Error& e) {
                device_failure = e.message();
              }
            }
          });
      if (verdict == core::AccessCheck::Ok && device_failure.empty() && hold && got > 0 &&
          off + static_cast<std::uint64_t>(got) == total) {
        verdict = registry.with_access_in(true, &pd_, incoming_.rkey, incoming_.base + before_tail, 8,
                                          Access::RemoteWrite, [&](char* p, const core::RegionMemory& memory) {
                                            if (memory.type == MemoryType::Host) {
                                              core::store_last_word(p, tail_hold_);
                                              return;
                                            }
                                            try {
                                              core::cuda::copy_memory(p, tail_hold_, 8, memory.device,
                                                                      "tcp WRITE into device memory");
                                            } catch (const Error& e) {
                                              device_failure = e.message();
                                            }
                                          });
      }
      if (verdict != core::AccessCheck::Ok) {
        nak_locked(incoming_.msn, Syndrome::RemAccess,
                   "RDMA WRITE target " + hex(addr) + " became invalid mid-message: " + core::to_string(verdict));
        return 0;
      }
      if (!device_failure.empty()) {
        nak_locked(incoming_.msn, Syndrome::RemOp,
                   "RDMA WRITE into device memory at " + hex(addr) + ": " + device_failure);
        return 0;
      }
      if (doorbell != nullptr && got > 0 && off + static_cast<std::uint64_t>(got) == total) core::ring(*doorbell);
      break;
    }
    case RxTarget::RecvBuffer:
    case RxTarget::ReadResult: {
      const bool recv = rx_target_ == RxTarget::RecvBuffer;
      SendEntry* e = recv ? nullptr : entry_for_msn_locked(rx_header_.msn);
      const auto& sges = recv ? incoming_.recv.sges : e->sges;
      const auto num = recv ? incoming_.recv.num_sge : e->num_sge;
      core::MemoryRegistry::Reader lock(registry);
      count = gather_locked(sges, num, rx_target_offset_, n, iov.data(), &lock);
      if (count < 0) {
        lock.unlock();
        if (recv) {
          push_recv_completion_locked(incoming_.recv, WcStatus::LocProtErr, WcOpcode::Recv, 0, false, 0);
          incoming_.has_recv = false;
          nak_locked(incoming_.msn, Syndrome::RemOp, "receive buffer was deregistered while a SEND landed in it");
        } else {
          fail_locked("READ result buffer was deregistered while the response arrived", WcStatus::LocProtErr, e->msn);
        }
        return 0;
      }
      land();
      break;
    }
  }
  if (from != nullptr) return n;
  if (got > 0) {
    rx_seen_ = true;
    ack_request_sent_ = false;
    return static_cast<std::size_t>(got);
  }
  if (got == 0) {
    fail_locked("connection closed by " + peer_text_ + " in the middle of a frame", WcStatus::RetryExcErr);
  } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
    fail_locked("receive from " + peer_text_ + " failed: " + std::strerror(errno), WcStatus::RetryExcErr);
  }
  return 0;
}

void TcpQp::finish_frame_locked() {
  rx_in_payload_ = false;
  const Header& h = rx_header_;
  if (rx_target_ == RxTarget::Discard) return;
  core::release_remote_placements();
  switch (h.type) {
    case FrameType::SendReq:
    case FrameType::WriteReq:
      incoming_.done += h.length;
      if (h.flags & wire::kLast) {
        incoming_.active = false;
        request_executed_locked(h.flags);
        if (incoming_.has_recv) {
          incoming_.has_recv = false;
          push_recv_completion_locked(incoming_.recv, WcStatus::Success,
                                      h.type == FrameType::SendReq ? WcOpcode::Recv : WcOpcode::RecvRdmaWithImm,
                                      static_cast<std::uint32_t>(incoming_.total), incoming_.with_imm,
                                      static_cast<std::uint32_t>(h.arg1));
        }
      }
      break;
    case FrameType::ReadResp:
      if (SendEntry* e = entry_for_msn_locked(h.msn)) {
        e->response_bytes += h.length;
        if (h.flags & wire::kLast) {
          e->response_done = true;
          complete_in_order_locked();
        }
      }
      break;
    default: break;
  }
}

}  // namespace rdmx::tcp
