// SPDX-License-Identifier: MIT
#include "providers/tcp/tcp_qp.hpp"
#include "providers/tcp/tcp_factory.hpp"

#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <tuple>

#include "core/ordered_placement.hpp"
#include "core/address_bundle.hpp"
#include "core/config.hpp"
#include "core/log.hpp"
#include "core/work_request.hpp"

namespace rdmx::tcp {
namespace {

using wire::FrameType;
using wire::Header;
using wire::Syndrome;
using core::carries_payload;
using core::completion_opcode;
using core::hex;
using core::is_atomic;
using core::msn_before;


constexpr std::uint8_t kAddressMagic = 'T';
constexpr std::uint8_t kAddressVersion = 1;
constexpr std::size_t kAddressSize = 38;
constexpr auto kAckRequestAfter = std::chrono::milliseconds(5);
constexpr auto kRnrRetryDelay = std::chrono::milliseconds(1);
constexpr std::uint64_t kLargeFrame = 1024;

bool is_request(FrameType t) {
  return t == FrameType::SendReq || t == FrameType::WriteReq || t == FrameType::ReadReq ||
         t == FrameType::FetchAddReq || t == FrameType::CmpSwapReq || t == FrameType::AckReq;
}

WcStatus status_for(Syndrome s) {
  switch (s) {
    case Syndrome::RemAccess: return WcStatus::RemAccessErr;
    case Syndrome::RemInvReq: return WcStatus::RemInvReqErr;
    case Syndrome::RemOp: return WcStatus::RemOpErr;
    case Syndrome::Rnr: return WcStatus::RnrRetryExcErr;
  }
  return WcStatus::GeneralErr;
}

// The hot-path socket calls go straight to the kernel: libc's wrappers are
// thread-cancellation points that add bookkeeping to every call, and rdmx
// never cancels threads.
inline ssize_t fast_recv(int fd, void* buffer, std::size_t length) {
  return syscall(SYS_recvfrom, fd, buffer, length, MSG_DONTWAIT, nullptr, nullptr);
}
inline ssize_t fast_send(int fd, const void* buffer, std::size_t length) {
  return syscall(SYS_sendto, fd, buffer, length, MSG_NOSIGNAL | MSG_DONTWAIT, nullptr, 0);
}

// Scratch space for payload that is received only to be thrown away.
std::uint8_t* discard_buffer() {
  static thread_local std::array<std::uint8_t, 64 * 1024> buffer;
  return buffer.data();
}
}  // namespace

// ---------------------------------------------------------------------------
// Addresses.

QpAddress TcpAddress::encode() const {
  QpAddress out;
  out.bytes.assign(kAddressSize, 0);
  auto* b = out.bytes.data();
  b[0] = kAddressMagic;
  b[1] = kAddressVersion;
  if (socket.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&socket);
    b[2] = 4;
    std::memcpy(b + 4, &a->sin_port, 2);
    std::memcpy(b + 6, &a->sin_addr, 4);
  } else {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&socket);
    b[2] = 6;
    std::memcpy(b + 4, &a->sin6_port, 2);
    std::memcpy(b + 6, &a->sin6_addr, 16);
    std::memcpy(b + 22, &a->sin6_scope_id, 4);
  }
  std::memcpy(b + 26, &qpn, 4);
  std::memcpy(b + 30, &nonce, 8);
  return out;
}

TcpAddress TcpAddress::decode(const QpAddress& address) {
  const auto& b = address.bytes;
  if (b.size() != kAddressSize || b[0] != kAddressMagic || b[1] != kAddressVersion || (b[2] != 4 && b[2] != 6)) {
    throw Error(ErrorCode::InvalidArgument, "not a tcp provider QP address",
                {.op = "connect", .sizes = "bytes=" + std::to_string(b.size()),
                 .hint = "both QPs must use the tcp provider; pass the peer's local_address() unchanged"});
  }
  TcpAddress out;
  if (b[2] == 4) {
    auto* a = reinterpret_cast<sockaddr_in*>(&out.socket);
    a->sin_family = AF_INET;
    std::memcpy(&a->sin_port, b.data() + 4, 2);
    std::memcpy(&a->sin_addr, b.data() + 6, 4);
    out.socket_len = sizeof(sockaddr_in);
  } else {
    auto* a = reinterpret_cast<sockaddr_in6*>(&out.socket);
    a->sin6_family = AF_INET6;
    std::memcpy(&a->sin6_port, b.data() + 4, 2);
    std::memcpy(&a->sin6_addr, b.data() + 6, 16);
    std::memcpy(&a->sin6_scope_id, b.data() + 22, 4);
    out.socket_len = sizeof(sockaddr_in6);
  }
  std::memcpy(&out.qpn, b.data() + 26, 4);
  std::memcpy(&out.nonce, b.data() + 30, 8);
  return out;
}

bool is_tcp_address(const QpAddress& address) {
  try {
    TcpAddress::decode(address);
    return true;
  } catch (const Error&) {
    return false;
  }
}

std::string TcpAddress::to_string() const {
  return format_address(reinterpret_cast<const sockaddr*>(&socket)) + "/qp" + std::to_string(qpn);
}

// ---------------------------------------------------------------------------
// Construction and verbs.

TcpQp::TcpQp(TcpDevice& device, core::RegistryProtectionDomain& pd, core::CompletionRing& send_cq,
             core::CompletionRing& recv_cq, const QpCaps& caps)
    : SoftRcQp("tcp", device.next_qpn(), wire::kMaxMessage, pd, send_cq, recv_cq,
               core::grant_qp_caps(caps, device.caps(), "tcp")),
      device_(device) {
  std::lock_guard engine(device_.engine_mutex());
  device_.add_qp_locked(this);
}

TcpQp::~TcpQp() {
  std::lock_guard engine(device_.engine_mutex());
  device_.remove_qp_locked(this);
  std::lock_guard lock(mutex_);
  say_goodbye_locked();
  close_socket_locked();
}

void TcpQp::say_goodbye_locked() {
  // Only between frames: a frame cut short is a broken connection anyway.
  if (!live_locked() || !established_ || state() == QpState::Error || tx_.active) return;
  Header bye;
  bye.type = FrameType::Bye;
  finish_header_locked(bye);
  std::uint8_t frame[wire::kHeaderSize];
  wire::encode(bye, frame);
  std::size_t sent = 0;
  const auto until = core::Clock::now() + std::chrono::milliseconds(100);
  while (sent < sizeof(frame)) {
    const ssize_t n = ::send(fd_, frame + sent, sizeof(frame) - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    const auto now = core::Clock::now();
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK) || now >= until) return;  // the peer sees a plain close
    pollfd pfd{fd_, POLLOUT, 0};
    ::poll(&pfd, 1, static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count()) + 1);
  }
  ::shutdown(fd_, SHUT_WR);
  epoll_ctl(device_.epoll_fd(), EPOLL_CTL_DEL, fd_, nullptr);
  device_.linger_locked(fd_);
  fd_ = -1;
  established_ = false;
  RDMX_INFO("tcp qp %u: destroyed; told %s", qpn_, peer_text_.c_str());
}

QpAddress TcpQp::local_address() const {
  TcpAddress self;
  self.socket = device_.listen_address();
  self.socket_len = self.socket.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  self.qpn = qpn_;
  self.nonce = device_.nonce();
  return self.encode();
}

int TcpQp::socket_fd() const {
  std::lock_guard lock(mutex_);
  return established_ ? fd_ : -1;
}

void TcpQp::connect(const QpAddress& remote, const ConnectOptions& options) {
  // An auto peer offers one address per provider: take ours.
  TcpAddress peer = TcpAddress::decode(core::part_for_provider(remote, is_tcp_address));
  std::lock_guard engine(device_.engine_mutex());
  std::lock_guard lock(mutex_);
  begin_connect_locked(device_.nonce(), {peer.nonce, peer.qpn, peer.to_string()}, options, "");
  remote_ = peer;
  if (initiator_) {
    start_connect_locked();
  } else if (int fd = device_.claim_pending_locked(qpn_, peer.qpn, peer.nonce); fd >= 0) {
    attach_locked(fd);
  }
}

TcpQp::Offer TcpQp::offer_connection_locked(int fd, std::uint32_t source_qpn, std::uint64_t source_nonce) {
  std::lock_guard lock(mutex_);
  if (!connect_requested_) return Offer::NotYet;
  if (initiator_ || established_ || state() == QpState::Error || remote_.qpn != source_qpn ||
      remote_.nonce != source_nonce) {
    return Offer::Refused;
  }
  attach_locked(fd);
  return Offer::Taken;
}

void TcpQp::lock_state() { mutex_.lock(); }
void TcpQp::unlock_state() { mutex_.unlock(); }

void TcpQp::send_queued_locked(SendEntry& e) {
  if (sq_.size() == 1) {
    // The peer's silence counts from when work is outstanding, not from its
    // last traffic: a QP idle for longer than RDMX_TIMEOUT is not dead. The
    // next timer scan stamps last_rx_ (no clock read on the posting path).
    rx_seen_ = true;
    ack_request_sent_ = false;
  }
  if (established_ && !tx_blocked_) {
    // This thread sends, so the background engine need not compete for the QP.
    device_.note_application_activity();
    if (!send_small_now_locked(e)) pump_locked(4);
  }
}

bool TcpQp::send_small_now_locked(const SendEntry& e) {
  // The latency path: a small SEND or WRITE with nothing queued ahead of it
  // goes out in one send() without the general frame builder. Anything else
  // falls back to pump_locked().
  if (tx_.active || !control_.empty() || !read_jobs_.empty() || rnr_paused_ || tx_msn_ != e.msn || tx_offset_ != 0 ||
      !carries_payload(e.opcode) || e.total > sizeof(tx_.header) - wire::kHeaderSize) {
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

// ---------------------------------------------------------------------------
// Connection management.

void TcpQp::start_connect_locked() {
  int fd = ::socket(remote_.socket.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    fail_locked(std::string("socket() failed: ") + std::strerror(errno), WcStatus::RetryExcErr);
    return;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&remote_.socket), remote_.socket_len);
  if (rc != 0 && errno != EINPROGRESS) {
    const int error = errno;
    ::close(fd);
    schedule_connect_retry_locked(error);
    return;
  }
  fd_ = fd;
  connecting_ = true;
  watch_socket_locked(EPOLL_CTL_ADD, EPOLLOUT | EPOLLIN | EPOLLRDHUP);
}

void TcpQp::watch_socket_locked(int operation, std::uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = watch_tag(Watch::Qp, qpn_);
  epoll_ctl(device_.epoll_fd(), operation, fd_, &ev);
}

void TcpQp::schedule_connect_retry_locked(int error) {
  RDMX_TRACE("tcp qp %u: connect to %s failed (%s); retrying", qpn_, peer_text_.c_str(), std::strerror(error));
  retry_connect_at_ = core::Clock::now() + retry_backoff_;
  retry_backoff_ = std::min(retry_backoff_ * 2, std::chrono::milliseconds(500));
}

void TcpQp::on_connected_locked() {
  connecting_ = false;
  established_ = true;
  last_rx_ = core::Clock::now();
  Header hello;
  hello.type = FrameType::Hello;
  hello.addr = device_.nonce();
  hello.arg0 = remote_.nonce;
  hello.rkey = qpn_;
  hello.arg1 = remote_.qpn;
  control_.push_front(hello);
  want_write_ = true;  // epoll currently watches EPOLLOUT
  set_want_write_locked(false);
  pump_locked(8);
  RDMX_INFO("tcp qp %u: connected to %s", qpn_, peer_text_.c_str());
}

void TcpQp::attach_locked(int fd) {
  fd_ = fd;
  established_ = true;
  last_rx_ = core::Clock::now();
  watch_socket_locked(EPOLL_CTL_ADD, EPOLLIN | EPOLLRDHUP);
  want_write_ = false;
  RDMX_INFO("tcp qp %u: accepted connection from %s", qpn_, peer_text_.c_str());
  pump_locked(8);
  // Bytes may already wait behind the HELLO; the level-triggered epoll reports them.
}

void TcpQp::begin_drain_locked() {
  if (fd_ < 0) return;
  if (!established_) {
    close_socket_locked();
    return;
  }
  // A frame cut short would read user memory whose WRs are about to be
  // flushed: drop it (the peer sees the connection end mid-frame).
  if (tx_.active && tx_.iov_count > 1) {
    tx_.active = false;
    control_.clear();
  }
  // Closing with unread bytes would make the kernel send a reset, which can
  // destroy the NAK before the peer reads it. So: send the NAK, shut down our
  // side, and read and discard until the peer closes (bounded in time).
  draining_ = true;
  drain_deadline_ = core::Clock::now() + std::min<std::chrono::milliseconds>(core::timeout(), std::chrono::seconds(2));
  pump_locked(4);
  if (fd_ >= 0 && !tx_.active && control_.empty()) {
    ::shutdown(fd_, SHUT_WR);
    write_shut_ = true;
    set_want_write_locked(false);
  }
}

void TcpQp::drain_locked() {
  if (!write_shut_) {
    pump_locked(4);
    if (fd_ < 0) return;
    if (!tx_.active && control_.empty()) {
      ::shutdown(fd_, SHUT_WR);
      write_shut_ = true;
      set_want_write_locked(false);
    }
  }
  for (int i = 0; i < 64 && fd_ >= 0; ++i) {
    ssize_t n = ::recv(fd_, discard_buffer(), 64 * 1024, MSG_DONTWAIT);
    if (n > 0) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    close_socket_locked();  // EOF or error: the peer is done with the connection
  }
}

void TcpQp::close_socket_locked() {
  if (fd_ < 0) return;
  epoll_ctl(device_.epoll_fd(), EPOLL_CTL_DEL, fd_, nullptr);
  ::close(fd_);
  fd_ = -1;
  established_ = false;
  connecting_ = false;
  draining_ = false;
  tx_.active = false;
  control_.clear();
}

void TcpQp::set_want_write_locked(bool want) {
  if (want == want_write_ || fd_ < 0) return;
  want_write_ = want;
  watch_socket_locked(EPOLL_CTL_MOD, EPOLLIN | EPOLLRDHUP | (want ? EPOLLOUT : 0u));
}

bool TcpQp::on_events(std::uint32_t events) {
  std::lock_guard lock(mutex_);
  if (fd_ < 0) return false;
  if (connecting_) {
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err == 0 && (events & EPOLLOUT)) {
      on_connected_locked();
    } else if (err != 0 || (events & (EPOLLERR | EPOLLHUP))) {
      close_socket_locked();
      schedule_connect_retry_locked(err);
    }
    return true;
  }
  if (draining_) {
    drain_locked();
    return true;
  }
  bool did = false;
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) did = receive_locked(64);
  if (live_locked() && (events & EPOLLOUT)) {
    tx_blocked_ = false;
    pump_locked(8);
    did = true;
  }
  return did;
}

int TcpQp::poll_fd(short& events) {
  std::lock_guard lock(mutex_);
  if (!live_locked() || connecting_ || !established_) return -1;
  events = POLLIN | POLLRDHUP | (tx_blocked_ || want_write_ ? POLLOUT : 0);
  return fd_;
}

bool TcpQp::on_timer(core::Clock::time_point now) {
  std::lock_guard lock(mutex_);
  if (draining_) {
    if (now > drain_deadline_) close_socket_locked();
    return true;
  }
  if (state() == QpState::Error || !connect_requested_) return false;
  if (!established_) {
    if (now > connect_deadline_) {
      fail_locked("could not establish the connection with " + peer_text_ + " within RDMX_TIMEOUT (" +
                      std::to_string(core::timeout().count()) + " ms); is the peer alive and did it connect its QP?",
                  WcStatus::RetryExcErr);
    } else if (initiator_ && !connecting_ && now >= retry_connect_at_) {
      start_connect_locked();
    }
    return true;
  }
  bool busy = false;
  if (rnr_paused_) {
    busy = true;
    if (now >= rnr_resume_at_) {
      rnr_paused_ = false;
      tx_msn_ = rnr_msn_;
      tx_offset_ = 0;
      pump_locked(4);
    }
  }
  // Receiving only flags traffic; the clock is read here, once per scan (about 1 ms).
  if (rx_seen_) {
    last_rx_ = now;
    rx_seen_ = false;
  }
  if (!sq_.empty() && state() != QpState::Error) {
    busy = true;
    auto idle = now - last_rx_;
    if (idle > core::timeout()) {
      fail_locked("no response from " + peer_text_ + " for " +
                      std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(idle).count()) +
                      " ms with work outstanding (RDMX_TIMEOUT)",
                  WcStatus::RetryExcErr);
    } else if (idle > kAckRequestAfter && !ack_request_sent_ && !rnr_paused_) {
      Header ping;
      ping.type = FrameType::AckReq;
      queue_control_locked(ping);
      ack_request_sent_ = true;
      pump_locked(2);
    }
  }
  return busy;
}

// ---------------------------------------------------------------------------
// Sending.

void TcpQp::queue_control_locked(Header header) { control_.push_back(header); }

void TcpQp::finish_header_locked(Header& h) {
  if (h.type == FrameType::Hello) return;
  h.flags |= wire::kAckValid;
  h.ack_msn = expected_msn_;
  ack_pending_ = false;
  ack_now_ = false;
}

int TcpQp::gather_locked(const std::array<Sge, kMaxSge>& sges, std::uint32_t num_sge, std::uint64_t offset,
                         std::uint64_t length, iovec* iov, bool check_write) {
  int count = 0;
  for (std::uint32_t i = 0; i < num_sge && length > 0; ++i) {
    const Sge& sge = sges[i];
    if (offset >= sge.length) {
      offset -= sge.length;
      continue;
    }
    std::uint64_t take = std::min<std::uint64_t>(sge.length - offset, length);
    if (check_write && device_.registry().check_locked(false, &pd_, sge.lkey, sge.addr + offset, take,
                                                      Access::LocalWrite) != core::AccessCheck::Ok) {
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
      auto chunk = static_cast<std::uint32_t>(std::min<std::uint64_t>(wire::kMaxChunk, job.total - job.offset));
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
          auto chunk = static_cast<std::uint32_t>(std::min<std::uint64_t>(wire::kMaxChunk, e.total - tx_offset_));
          h.type = send ? FrameType::SendReq : FrameType::WriteReq;
          h.length = chunk;
          if (send) h.rkey = 0;
          else h.addr = e.remote_addr + tx_offset_;
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
          tx_.iov_count = 1 + gather_locked(e.sges, e.num_sge, tx_offset_, chunk, &tx_.iov[1], false);
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
      auto verdict = device_.registry().with_access(true, &pd_, tx_.rkey, tx_.addr, tx_.length, Access::RemoteRead,
                                                    [&](char*) { n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT); });
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

bool TcpQp::requests_to_send_locked() const { return !rnr_paused_ && msn_before(tx_msn_, next_msn_); }
bool TcpQp::has_data_frames_locked() const { return !read_jobs_.empty() || requests_to_send_locked(); }

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
// Receiving.

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
      only_ack = device_.in_application_pass_locked() && control_.empty() && !tx_.active &&
                 !has_data_frames_locked();
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
  if (const char* bad = wire::validate(h)) {
    protocol_error_locked(std::string(bad) + " (frame type " + std::to_string(static_cast<int>(h.type)) + ")");
    return false;
  }
  last_frame_large_ = h.length >= kLargeFrame;
  if (h.flags & wire::kAckValid) {
    process_ack_locked(h.ack_msn);
    if (!live_locked()) return false;
  }
  if (h.type == FrameType::Hello) {
    protocol_error_locked("HELLO on an established connection");
    return false;
  }
  bool ok = is_request(h.type) ? handle_request_locked(h) : handle_response_locked(h);
  return ok && live_locked();
}

void TcpQp::start_discard_locked(const Header& h) {
  rx_header_ = h;
  rx_target_ = RxTarget::Discard;
  rx_target_offset_ = 0;
  rx_left_ = h.length;
  rx_in_payload_ = h.length > 0;
}

bool TcpQp::handle_request_locked(const Header& h) {
  if (h.type == FrameType::AckReq) {
    ack_pending_ = true;
    ack_now_ = true;
    return true;
  }
  const bool first = (h.flags & wire::kFirst) != 0;
  if (rnr_discarding_) {
    if (h.msn == rnr_discard_msn_ && first) {
      rnr_discarding_ = false;  // the retransmission starts here
    } else {
      start_discard_locked(h);
      return true;
    }
  }
  if (incoming_.active) {
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
  if (h.msn != expected_msn_) {
    protocol_error_locked("request msn " + std::to_string(h.msn) + " out of sequence (expected " +
                          std::to_string(expected_msn_) + ")");
    return false;
  }
  auto& registry = device_.registry();
  switch (h.type) {
    case FrameType::SendReq:
    case FrameType::WriteReq: {
      const bool last = (h.flags & wire::kLast) != 0;
      if (!first || last != (h.length == h.arg0)) {
        protocol_error_locked("message msn " + std::to_string(h.msn) + " does not start with a FIRST chunk that fits");
        return false;
      }
      const bool send = h.type == FrameType::SendReq;
      const bool imm = (h.flags & wire::kWithImm) != 0;
      if (!send && !imm && last && h.length > 0 && rx_end_ - rx_begin_ >= h.length) {
        // A small WRITE already in the read-ahead buffer: check and copy under one lock.
        const std::uint8_t* payload = rx_buf_.data() + rx_begin_;
        auto verdict = registry.with_access(true, &pd_, h.rkey, h.addr, h.length, Access::RemoteWrite,
                                            [&](char* p) { core::copy_last_word_last(p, payload, h.length); });
        if (verdict != core::AccessCheck::Ok) {
          nak_locked(h.msn, Syndrome::RemAccess,
                     "RDMA WRITE to " + hex(h.addr) + " length " + std::to_string(h.arg0) + " rkey " + hex(h.rkey) +
                         ": " + core::to_string(verdict));
          return false;
        }
        rx_begin_ += h.length;
        request_executed_locked(h.flags);
        return true;
      }
      if (!send) {
        auto verdict = registry.check(true, &pd_, h.rkey, h.addr, h.arg0, Access::RemoteWrite);
        if (verdict != core::AccessCheck::Ok) {
          nak_locked(h.msn, Syndrome::RemAccess,
                     "RDMA WRITE to " + hex(h.addr) + " length " + std::to_string(h.arg0) + " rkey " + hex(h.rkey) +
                         ": " + core::to_string(verdict));
          return false;
        }
      }
      incoming_.has_recv = false;  // the rest is set below; the receive entry only when one is taken
      if (send || imm) {
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
          return true;
        }
        incoming_.recv = rq_.front();
        incoming_.has_recv = true;
        rq_.pop();
        if (send && h.arg0 > incoming_.recv.capacity) {
          push_recv_completion_locked(incoming_.recv, WcStatus::LocLenErr, WcOpcode::Recv, 0, false, 0);
          incoming_.has_recv = false;
          nak_locked(h.msn, Syndrome::RemInvReq,
                     "SEND of " + std::to_string(h.arg0) + " bytes is larger than the posted receive (" +
                         std::to_string(incoming_.recv.capacity) + " bytes, wr_id " +
                         std::to_string(incoming_.recv.wr_id) + ")");
          return false;
        }
        if (send) {
          std::array<iovec, kMaxSge> scratch;
          auto lock = registry.read_lock();
          if (gather_locked(incoming_.recv.sges, incoming_.recv.num_sge, 0, h.arg0, scratch.data(), true) < 0) {
            lock.unlock();
            push_recv_completion_locked(incoming_.recv, WcStatus::LocProtErr, WcOpcode::Recv, 0, false, 0);
            incoming_.has_recv = false;
            nak_locked(h.msn, Syndrome::RemOp, "posted receive wr_id " + std::to_string(incoming_.recv.wr_id) +
                                                   " has an SGE that is not registered for local write");
            return false;
          }
        }
      }
      incoming_.active = true;
      incoming_.type = h.type;
      incoming_.msn = h.msn;
      incoming_.total = h.arg0;
      incoming_.done = 0;
      incoming_.base = h.addr;
      incoming_.rkey = h.rkey;
      incoming_.with_imm = imm;
      rx_header_ = h;
      rx_target_ = send ? RxTarget::RecvBuffer : RxTarget::RemoteWrite;
      rx_target_offset_ = 0;
      rx_left_ = h.length;
      rx_in_payload_ = true;  // also for 0 bytes: finish_frame completes the message
      return true;
    }
    case FrameType::ReadReq: {
      auto verdict = registry.check(true, &pd_, h.rkey, h.addr, h.arg0, Access::RemoteRead);
      if (verdict != core::AccessCheck::Ok) {
        nak_locked(h.msn, Syndrome::RemAccess,
                   "RDMA READ of " + hex(h.addr) + " length " + std::to_string(h.arg0) + " rkey " + hex(h.rkey) +
                       ": " + core::to_string(verdict));
        return false;
      }
      read_jobs_.push_back(ReadJob{h.msn, h.addr, h.rkey, h.arg0, 0});
      ++expected_msn_;
      ack_pending_ = true;
      return true;
    }
    case FrameType::FetchAddReq:
    case FrameType::CmpSwapReq: {
      if (h.addr % 8 != 0) {
        nak_locked(h.msn, Syndrome::RemInvReq, "atomic target " + hex(h.addr) + " is not 8-byte aligned");
        return false;
      }
      std::uint64_t original = 0;
      auto verdict = registry.with_access(true, &pd_, h.rkey, h.addr, 8, Access::RemoteAtomic, [&](char* p) {
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
    default:
      break;
  }
  protocol_error_locked("unexpected request type");
  return false;
}

bool TcpQp::handle_response_locked(const Header& h) {
  switch (h.type) {
    case FrameType::Bye:
      peer_said_bye_ = true;
      return true;
    case FrameType::Ack:
      if (!(h.flags & wire::kAckValid)) {
        protocol_error_locked("ACK without an acknowledged MSN");
        return false;
      }
      return true;
    case FrameType::ReadResp: {
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
    case FrameType::AtomicResp: {
      SendEntry* e = entry_for_msn_locked(h.msn);
      if (e == nullptr || !is_atomic(e->opcode) || e->response_done || !msn_before(h.msn, sent_msn_high_)) {
        protocol_error_locked("atomic response for msn " + std::to_string(h.msn) + " that is not an outstanding atomic");
        return false;
      }
      const Sge& sge = e->sges[0];
      auto verdict = device_.registry().with_access(false, &pd_, sge.lkey, sge.addr, 8, Access::LocalWrite,
                                                    [&](char* p) { std::memcpy(p, &h.arg0, 8); });
      if (verdict != core::AccessCheck::Ok) {
        fail_locked("atomic result buffer " + hex(sge.addr) + " lkey " + hex(sge.lkey) + ": " +
                        core::to_string(verdict),
                    WcStatus::LocProtErr, e->msn);
        return false;
      }
      e->response_done = true;
      complete_in_order_locked();
      return true;
    }
    case FrameType::Nak: {
      SendEntry* e = entry_for_msn_locked(h.msn);
      if (e == nullptr || !msn_before(h.msn, sent_msn_high_)) {
        protocol_error_locked("NAK for msn " + std::to_string(h.msn) + " that is not outstanding");
        return false;
      }
      auto syndrome = static_cast<Syndrome>(h.arg0);
      if (syndrome == Syndrome::Rnr) {
        if (e->opcode != Opcode::Send && e->opcode != Opcode::SendWithImm && e->opcode != Opcode::RdmaWriteWithImm) {
          protocol_error_locked("RNR NAK for a request that consumes no receive");
          return false;
        }
        auto now = core::Clock::now();
        if (!e->rnr_seen) {
          e->rnr_seen = true;
          e->first_rnr = now;
        }
        if (now - e->first_rnr > rnr_timeout_) {
          fail_locked("peer " + peer_text_ + " had no receive posted for " + std::string(to_string(e->opcode)) +
                          " wr_id " + std::to_string(e->wr_id) + " within the RNR timeout (" +
                          std::to_string(rnr_timeout_.count()) + " ms)",
                      WcStatus::RnrRetryExcErr, e->msn);
          return false;
        }
        rnr_paused_ = true;
        rnr_msn_ = h.msn;
        rnr_resume_at_ = now + kRnrRetryDelay;
        return true;
      }
      fail_locked("peer " + peer_text_ + " refused " + std::string(to_string(e->opcode)) + " wr_id " +
                      std::to_string(e->wr_id) + " (" + to_string(status_for(syndrome)) + ")",
                  status_for(syndrome), e->msn);
      return false;
    }
    default:
      break;
  }
  protocol_error_locked("unexpected response type");
  return false;
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
  auto land = [&]() {
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
      iov[0] = {discard_buffer(), std::min<std::size_t>(n, 64 * 1024)};
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
      const std::size_t direct = off < before_tail ? static_cast<std::size_t>(std::min<std::uint64_t>(n, before_tail - off)) : 0;
      auto verdict = registry.with_access(true, &pd_, incoming_.rkey, addr, n, Access::RemoteWrite, [&](char* p) {
        count = 0;
        if (direct > 0) iov[static_cast<std::size_t>(count++)] = {p, direct};
        if (direct < n) iov[static_cast<std::size_t>(count++)] = {tail_hold_ + (off + direct - before_tail), n - direct};
        land();
      });
      if (verdict == core::AccessCheck::Ok && hold && got > 0 && off + static_cast<std::uint64_t>(got) == total) {
        verdict = registry.with_access(true, &pd_, incoming_.rkey, incoming_.base + before_tail, 8, Access::RemoteWrite,
                                       [&](char* p) { core::store_last_word(p, tail_hold_); });
      }
      if (verdict != core::AccessCheck::Ok) {
        nak_locked(incoming_.msn, Syndrome::RemAccess,
                   "RDMA WRITE target " + hex(addr) + " became invalid mid-message: " + core::to_string(verdict));
        return 0;
      }
      break;
    }
    case RxTarget::RecvBuffer:
    case RxTarget::ReadResult: {
      const bool recv = rx_target_ == RxTarget::RecvBuffer;
      SendEntry* e = recv ? nullptr : entry_for_msn_locked(rx_header_.msn);
      const auto& sges = recv ? incoming_.recv.sges : e->sges;
      const auto num = recv ? incoming_.recv.num_sge : e->num_sge;
      auto lock = registry.read_lock();
      count = gather_locked(sges, num, rx_target_offset_, n, iov.data(), true);
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
    default:
      break;
  }
}

void TcpQp::request_executed_locked(std::uint16_t flags) {
  ++expected_msn_;
  ack_pending_ = true;
  if (flags & wire::kAckNow) ack_now_ = true;
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

core::SendEntry* TcpQp::entry_for_msn_locked(std::uint32_t msn) { return SoftRcQp::entry_for_msn_locked(msn, sq_.size()); }

void TcpQp::complete_in_order_locked() { complete_done_locked(sq_.size()); }

void TcpQp::nak_locked(std::uint32_t msn, Syndrome syndrome, const std::string& why) {
  Header nak;
  nak.type = FrameType::Nak;
  nak.msn = msn;
  nak.arg0 = static_cast<std::uint64_t>(syndrome);
  control_.push_front(nak);
  // As in IB, the responder's QP fails too; the NAK is flushed before the socket closes.
  fail_locked("refused request msn " + std::to_string(msn) + " from " + peer_text_ + ": " + why,
              WcStatus::WrFlushErr);
}

// ---------------------------------------------------------------------------
// Errors and completions.

void TcpQp::protocol_error_locked(const std::string& what) {
  fail_locked("protocol error from " + peer_text_ + ": " + what, WcStatus::WrFlushErr);
}

bool TcpQp::peer_left_in_order_locked(const std::string&) const { return peer_said_bye_; }

void TcpQp::error_entered_locked() {
  // Stop producing work; what must still reach the peer is a NAK.
  read_jobs_.clear();
  rnr_paused_ = true;
  tx_msn_ = sent_msn_high_ = next_msn_;
  std::erase_if(control_, [](const Header& h) { return h.type != FrameType::Nak; });
  begin_drain_locked();
  if (incoming_.has_recv) {
    push_recv_completion_locked(incoming_.recv, WcStatus::WrFlushErr, WcOpcode::Recv, 0, false, 0);
    incoming_.has_recv = false;
  }
  incoming_.active = false;
}

}  // namespace rdmx::tcp
