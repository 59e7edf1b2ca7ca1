// SPDX-License-Identifier: MIT
// A tcp QP's connection: setting up the one TCP connection it uses (the
// initiator connects, the acceptor takes the socket its device accepted),
// the socket's epoll watch, the timers (connect retries and deadline, RNR
// resumption, the peer's silence), and the orderly or failed end.
#include "providers/tcp/tcp_qp.hpp"

#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "driver/address_bundle.hpp"
#include "driver/work_request.hpp"
#include "providers/tcp/tcp_factory.hpp"
#include "services/auth.hpp"
#include "services/config.hpp"
#include "services/log.hpp"
#include "services/mutex.hpp"

namespace rdmx::tcp {

namespace {

constexpr auto kAckRequestAfter = std::chrono::milliseconds(5);

}  // namespace

TcpQp::TcpQp(TcpDevice& device, const core::QpParts& parts, const QpCaps& caps)
    : SoftRcQp("tcp", device.next_qpn(), wire::kMaxMessage, parts, core::grant_qp_caps(caps, device.caps(), "tcp"),
               device),
      device_(device) {
  core::LockGuard engine(device_.lock());
  device_.add_qp_locked(this);
}

TcpQp::~TcpQp() {
  core::LockGuard engine(device_.lock());
  device_.remove_qp_locked(this);
  StateGuard lock(*this);
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

int TcpQp::socket_fd() const {
  StateGuard lock(*this);
  return established_ ? fd_ : -1;
}

void TcpQp::connect(const QpAddress& remote, const ConnectOptions& options) {
  // Said when a connection is first made, not when a device opens (rdmx info opens one to look).
  core::auth::warn_if_unauthenticated("tcp provider");
  // An auto peer offers one address per provider: take ours.
  TcpAddress peer = TcpAddress::decode(core::part_for_provider(remote, is_tcp_address));
  core::LockGuard engine(device_.lock());
  StateGuard lock(*this);
  begin_connect_locked(device_.nonce(), {peer.nonce, peer.qpn, peer.to_string()}, options, "");
  remote_ = peer;
  if (initiator_) {
    start_connect_locked();
  } else if (auto pending = device_.claim_pending_locked(qpn_, peer.qpn, peer.nonce)) {
    attach_locked(pending->fd);
  }
}

core::Offer TcpQp::offer_locked(const core::PendingConnection& pending) {
  StateGuard lock(*this);
  if (!connect_requested_) return core::Offer::NotYet;
  if (initiator_ || established_ || state() == QpState::Error || !from_peer_locked(pending)) {
    return core::Offer::Refused;
  }
  attach_locked(pending.fd);
  return core::Offer::Taken;
}

// The analysis sees the QP as the lock (SoftRcQp), not the mutex behind it.
void TcpQp::lock_state() RDMX_NO_THREAD_SAFETY_ANALYSIS { mutex_.lock(); }
void TcpQp::unlock_state() RDMX_NO_THREAD_SAFETY_ANALYSIS { mutex_.unlock(); }

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
  attempt_started_ = core::Clock::now();
  watch_socket_locked(EPOLL_CTL_ADD, EPOLLOUT | EPOLLIN | EPOLLRDHUP);
}

void TcpQp::watch_socket_locked(int operation, std::uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = watch_tag(Watch::Qp, qpn_);
  epoll_ctl(device_.epoll_fd(), operation, fd_, &ev);
}

void TcpQp::schedule_connect_retry_locked(int error) { schedule_connect_retry_locked(std::strerror(error)); }

void TcpQp::schedule_connect_retry_locked(const std::string& failure) {
  RDMX_TRACE("tcp qp %u: connect to %s failed (%s); retrying", qpn_, peer_text_.c_str(), failure.c_str());
  ++failed_attempts_;
  last_attempt_failure_ = failure;
  retry_connect_at_ = core::Clock::now() + retry_backoff_;
  retry_backoff_ = std::min(retry_backoff_ * 2, std::chrono::milliseconds(500));
}

void TcpQp::read_challenge_locked() {
  const ssize_t n = ::recv(fd_, challenge_.data() + challenge_got_, challenge_.size() - challenge_got_, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n <= 0) {
    // The listener closed at once (full, or going away): try again until RDMX_TIMEOUT.
    const int error = n == 0 ? ECONNRESET : errno;
    close_socket_locked();
    schedule_connect_retry_locked(error);
    return;
  }
  challenge_got_ += static_cast<std::size_t>(n);
  if (challenge_got_ < challenge_.size()) return;
  const Header h = wire::decode(challenge_.data());
  const char* bad = wire::validate(h);
  if (bad == nullptr && h.type != FrameType::Challenge) bad = "its first frame is not a CHALLENGE";
  if (bad != nullptr) {
    fail_locked(
        "connecting to " + peer_text_ + ": " + bad + " (an rdmx of another version, or something else, listens there)",
        WcStatus::RetryExcErr);
    return;
  }
  std::array<std::uint8_t, wire::kHeaderSize + wire::kHelloPayload> hello{};
  try {
    const bool have_key = core::auth::key_configured();
    if (h.arg0 == 1 && !have_key) {
      fail_locked(peer_text_ +
                      " requires a proof of the job secret and this process has none: set RDMX_AUTH_KEY (or "
                      "RDMX_AUTH_KEY_FILE) to the job's secret on every rank",
                  WcStatus::RetryExcErr);
      return;
    }
    if (h.arg0 != 1 && have_key) {
      refuse_acceptor_locked("asks for no proof of the job secret, and this process has one");
      return;
    }
    core::auth::Challenge challenge;
    std::memcpy(challenge.data(), challenge_.data() + wire::kHeaderSize, challenge.size());
    own_challenge_ = core::auth::new_challenge();
    wire::encode(wire::hello_frame(ids_), hello.data());
    const core::auth::Proof proof = core::auth::prove(wire::kAuthPurpose, challenge, {hello.data(), wire::kHeaderSize});
    std::memcpy(hello.data() + wire::kHeaderSize, proof.data(), proof.size());
    std::memcpy(hello.data() + wire::kHeaderSize + proof.size(), own_challenge_.data(), own_challenge_.size());
  } catch (const Error& e) {
    fail_locked(std::string("cannot prove the job secret to ") + peer_text_ + ": " + e.what(), WcStatus::RetryExcErr);
    return;
  }
  // Nothing else was sent on this socket yet: its buffer has room.
  if (::send(fd_, hello.data(), hello.size(), MSG_DONTWAIT | MSG_NOSIGNAL) != static_cast<ssize_t>(hello.size())) {
    fail_locked("sending HELLO to " + peer_text_ + " failed: " + std::strerror(errno), WcStatus::RetryExcErr);
    return;
  }
  awaiting_challenge_ = false;
  awaiting_accept_ = true;
  accept_got_ = 0;
}

void TcpQp::read_accept_locked() {
  // Exactly the answer to the HELLO: the bytes after it are the acceptor's first frames.
  for (;;) {
    const std::size_t want = accept_got_ < wire::kHeaderSize ? wire::kHeaderSize : accept_.size();
    const ssize_t n = ::recv(fd_, accept_.data() + accept_got_, want - accept_got_, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (n <= 0 && accept_got_ == 0) {
      // As before the challenge: a listener short of room closes unanswered
      // connections, so try again until RDMX_TIMEOUT. Nothing was trusted yet.
      const int error = n == 0 ? ECONNRESET : errno;
      close_socket_locked();
      schedule_connect_retry_locked(error);
      return;
    }
    if (n <= 0) {
      refuse_acceptor_locked("closed the connection in the middle of its answer to HELLO");
      return;
    }
    accept_got_ += static_cast<std::size_t>(n);
    if (accept_got_ == wire::kHeaderSize) {
      const Header h = wire::decode(accept_.data());
      if (wire::validate(h) == nullptr && h.type == FrameType::Refused) {
        fail_locked(peer_text_ +
                        " refused this connection: the proof of the job secret did not verify (RDMX_AUTH_KEY or "
                        "RDMX_AUTH_KEY_FILE differs between the ranks, or this one has none)",
                    WcStatus::RetryExcErr);
        return;
      }
      if (wire::validate(h) != nullptr || h.type != FrameType::Accept) {
        refuse_acceptor_locked("answered HELLO with something other than ACCEPT or REFUSED");
        return;
      }
    }
    if (accept_got_ == accept_.size()) break;
  }
  core::auth::Challenge theirs;
  std::memcpy(theirs.data(), challenge_.data() + wire::kHeaderSize, theirs.size());
  core::auth::Proof proof;
  std::memcpy(proof.data(), accept_.data() + wire::kHeaderSize, proof.size());
  bool verified = false;
  try {
    verified = core::auth::verify(wire::kAcceptPurpose, own_challenge_, theirs, proof);
  } catch (const Error& e) {
    fail_locked(std::string("cannot check the proof of the job secret from ") + peer_text_ + ": " + e.what(),
                WcStatus::RetryExcErr);
    return;
  }
  if (!verified) {
    refuse_acceptor_locked("did not prove the job secret in return");
    return;
  }
  awaiting_accept_ = false;
  on_connected_locked();
}

void TcpQp::refuse_acceptor_locked(const std::string& why) {
  // A listener that cannot prove the secret is not the job's peer: one
  // started without the secret, or another process on the port.
  fail_locked("connecting to " + peer_text_ + ": the listener " + why +
                  "; this QP sent it nothing else and closed the connection. Give every rank the same "
                  "RDMX_AUTH_KEY (or RDMX_AUTH_KEY_FILE); if they have it, something else may be listening on "
                  "that port",
              WcStatus::RetryExcErr);
}

void TcpQp::on_connected_locked() {
  connecting_ = false;
  established_ = true;
  last_rx_ = core::Clock::now();
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
    ssize_t n = ::recv(fd_, discard_buffer(), kDiscardBuffer, MSG_DONTWAIT);
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
  awaiting_challenge_ = false;
  awaiting_accept_ = false;
  draining_ = false;
  tx_.active = false;
  control_.clear();
}

void TcpQp::set_want_write_locked(bool want) {
  if (want == want_write_ || fd_ < 0) return;
  want_write_ = want;
  watch_socket_locked(EPOLL_CTL_MOD, EPOLLIN | EPOLLRDHUP | (want ? EPOLLOUT : 0u));
}

bool TcpQp::on_socket_locked(std::uint32_t events) {
  StateGuard lock(*this);
  if (fd_ < 0) return false;
  if (connecting_) {
    if (awaiting_accept_) {
      read_accept_locked();
      return true;
    }
    if (!awaiting_challenge_) {
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0 || !(events & EPOLLOUT)) {
        if (err != 0 || (events & (EPOLLERR | EPOLLHUP))) {
          close_socket_locked();
          schedule_connect_retry_locked(err);
        }
        return true;
      }
      // Connected: the acceptor speaks first.
      awaiting_challenge_ = true;
      challenge_got_ = 0;
      want_write_ = false;
      watch_socket_locked(EPOLL_CTL_MOD, EPOLLIN | EPOLLRDHUP);
    }
    read_challenge_locked();
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
  StateGuard lock(*this);
  if (!live_locked() || connecting_ || !established_) return -1;
  events = POLLIN | POLLRDHUP | (tx_blocked_ || want_write_ ? POLLOUT : 0);
  return fd_;
}

bool TcpQp::on_timer_locked(core::Clock::time_point now) {
  StateGuard lock(*this);
  if (draining_) {
    if (now > drain_deadline_) close_socket_locked();
    return true;
  }
  if (state() == QpState::Error || !connect_requested_) return false;
  if (!established_) {
    // The acceptor speaks first. A connection its full accept queue dropped
    // after the handshake looks connected here, and this side, which sends
    // nothing before the CHALLENGE, would wait for good; a SYN it dropped
    // waits for the kernel's growing retransmissions. Either way the attempt
    // is abandoned and made again, waiting longer each time.
    const auto answer_wait = std::chrono::milliseconds(1000 << std::min(failed_attempts_, 3));
    if (now > connect_deadline_) {
      const std::string attempts = failed_attempts_ == 0 ? ""
                                                         : "; " + std::to_string(failed_attempts_) +
                                                               " attempts failed, the last: " + last_attempt_failure_;
      fail_locked("could not establish the connection with " + peer_text_ + " within RDMX_TIMEOUT (" +
                      std::to_string(core::timeout().count()) + " ms)" + attempts +
                      "; is the peer alive and did it connect its QP?" + device_.descriptor_shortage_since(created_at_),
                  WcStatus::RetryExcErr);
    } else if (initiator_ && connecting_ && !awaiting_accept_ && now - attempt_started_ > answer_wait) {
      close_socket_locked();
      schedule_connect_retry_locked("the listener did not answer within " + std::to_string(answer_wait.count()) +
                                    " ms (a full accept queue drops connections silently)");
    } else if (initiator_ && !connecting_ && now >= retry_connect_at_) {
      start_connect_locked();
    }
    // Only a retry to start is due soon; the rest waits for socket events or
    // for deadlines a second or more away, which the idle engine's wake-up meets.
    return initiator_ && !connecting_ && state() != QpState::Error;
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
