// SPDX-License-Identifier: MIT
// A shm QP's connection: the initiator creates the shared segment and hands
// it over the peer's Unix socket with a HELLO, the acceptor maps it and both
// prove that cross-memory attach works; then the socket carries wake-ups,
// region offers and, by closing, the news that the peer is gone. Also the
// timers (connect retries and deadline, RNR clocks) and the error hooks.
#include "providers/shm/shm_qp.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include "services/kernel_random.hpp"

#include "driver/address_bundle.hpp"
#include "driver/work_request.hpp"
#include "providers/shm/cross_memory.hpp"
#include "providers/shm/offer_link.hpp"
#include "services/config.hpp"
#include "services/log.hpp"
#include "services/mutex.hpp"
#include "services/wait.hpp"

namespace rdmx::shm {

namespace {

constexpr auto kMaxConnectBackoff = std::chrono::milliseconds(100);

int peer_pid_of(int socket) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return -1;
  return cred.pid;
}

}  // namespace

ShmQp::ShmQp(ShmDevice& device, const core::QpParts& parts, const QpCaps& caps)
    : SoftRcQp("shm", device.next_qpn(), kMaxMessage, parts, core::grant_qp_caps(caps, device.caps(), "shm"), device),
      device_(device),
      eager_(eager_limit()),
      probe_value_(core::kernel_random64() | 1ull << 40) {
  core::LockGuard lock(device_.lock());
  device_.add_qp_locked(this);
  probe_ = device_.claim_probe_locked();
}

ShmQp::~ShmQp() {
  core::LockGuard lock(device_.lock());
  device_.remove_qp_locked(this);
  device_.release_probe_locked(probe_);
  close_socket_locked();  // drops the regions we mapped too
  if (segment_ != nullptr) {
    // A progress() call that read our probe just before we released it may
    // still look at the segment: leave readable zeros there, not a hole.
    ::mmap(segment_, segment_bytes_, PROT_READ, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  }
}

void ShmQp::update_probe_locked() {
  if (probe_ == nullptr) return;
  const bool live = state() != QpState::Error;
  const bool busy = nak_pending_ || (live && connect_requested_ && (!accepted_ || !sq_.empty()));
  probe_->busy.store(busy ? 1 : 0, std::memory_order_relaxed);
  if (live && in_.attached()) {
    probe_->expect.store(in_.next_stamp_value(), std::memory_order_relaxed);
    probe_->stamp.store(in_.next_stamp(), std::memory_order_release);
  } else {
    probe_->stamp.store(nullptr, std::memory_order_release);
  }
}

// The analysis sees the QP as the lock (SoftRcQp), not the device lock behind it.
void ShmQp::lock_state() RDMX_NO_THREAD_SAFETY_ANALYSIS { device_.lock().lock(); }

void ShmQp::unlock_state() RDMX_NO_THREAD_SAFETY_ANALYSIS {
  update_probe_locked();
  device_.lock().unlock();
}

void ShmQp::connect(const QpAddress& remote, const ConnectOptions& options) {
  // An auto peer offers one address per provider: take ours.
  ShmAddress peer = ShmAddress::decode(core::part_for_provider(remote, ShmAddress::is_shm));
  std::string why;
  if (!reachable(peer, &why)) {
    throw Error(ErrorCode::InvalidArgument, "the shm provider cannot reach this peer: " + why,
                {.op = "connect",
                 .peer_rank = options.peer_rank,
                 .peer_addr = peer.to_string(),
                 .hint = "shm connects processes on one host; use RDMX_PROVIDER=auto or tcp for other hosts"});
  }
  StateGuard lock(*this);
  begin_connect_locked(device_.nonce(), {peer.nonce, peer.qpn, peer.to_string()}, options, why);
  remote_ = peer;
  if (initiator_) {
    // The initiator owns the segment: create it now, so work can be queued in it at once.
    const std::size_t bytes = segment_size(kRingSlots);
    int memfd = ::memfd_create("rdmx-shm-qp", MFD_CLOEXEC);
    void* base = MAP_FAILED;
    if (memfd >= 0 && ::ftruncate(memfd, static_cast<off_t>(bytes)) == 0) {
      base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    }
    if (base == MAP_FAILED) {
      int saved = errno;
      if (memfd >= 0) ::close(memfd);
      fail_locked(std::string("cannot create the shared segment (memfd_create/mmap): ") + std::strerror(saved),
                  WcStatus::RetryExcErr);
      return;
    }
    auto* seg = static_cast<SegmentHeader*>(base);
    seg->magic = kSegmentMagic;
    seg->version = kSegmentVersion;
    seg->ring_slots = kRingSlots;
    segment_ = base;
    segment_bytes_ = bytes;
    attach_segment_locked(base, true);
    memfd_ = memfd;
    start_connect_locked();
  } else {
    device_held_by_state();
    if (auto pending = device_.claim_pending_locked(qpn_, peer.qpn, peer.nonce)) accept_locked(*pending);
  }
}

// ---------------------------------------------------------------------------
// Connection.

void ShmQp::attach_segment_locked(void* base, bool initiator) {
  auto* seg = static_cast<SegmentHeader*>(base);
  const int out = initiator ? 0 : 1;
  const int in = 1 - out;
  auto* data = reinterpret_cast<std::uint8_t*>(seg + 1);
  const std::size_t ring_bytes = static_cast<std::size_t>(kRingSlots) * kSlot;
  out_control_ = &seg->ring[out];
  in_control_ = &seg->ring[in];
  out_ = RingProducer(out_control_, data + static_cast<std::size_t>(out) * ring_bytes, kRingSlots);
  in_ = RingConsumer(in_control_, data + static_cast<std::size_t>(in) * ring_bytes, kRingSlots);
}

void ShmQp::start_connect_locked() {
  // A dead peer is reported at once, not after RDMX_TIMEOUT.
  if (::kill(static_cast<pid_t>(remote_.pid), 0) != 0 && errno == ESRCH) {
    fail_locked("connect to " + describe_peer() + ": the process no longer exists", WcStatus::RetryExcErr);
    return;
  }
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    fail_locked(std::string("socket(AF_UNIX) failed: ") + std::strerror(errno), WcStatus::RetryExcErr);
    return;
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, remote_.socket_path.c_str(), remote_.socket_path.size() + 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int error = errno;
    ::close(fd);
    if (core::Clock::now() >= connect_deadline_) {
      fail_locked("cannot connect to " + describe_peer() + ": " + std::strerror(error), WcStatus::RetryExcErr);
      return;
    }
    // The listener's backlog is full (EAGAIN) or it is going away: retry with backoff.
    retry_connect_at_ = core::Clock::now() + retry_backoff_;
    retry_backoff_ = std::min(retry_backoff_ * 2, kMaxConnectBackoff);
    return;
  }
  socket_ = fd;
  peer_pid_ = peer_pid_of(fd);
  Hello hello;
  hello.ids = ids_;
  hello.segment_bytes = segment_bytes_;
  hello.ring_slots = kRingSlots;
  hello.probe_addr = reinterpret_cast<std::uint64_t>(&probe_value_);
  hello.probe_value = probe_value_;
  // The segment stays open until the peer accepts it: a peer whose pending
  // connections are full closes the handshake unanswered, and the HELLO is
  // sent again.
  int error = send_with_fd(fd, &hello, sizeof(hello), memfd_);
  if ((error == EPIPE || error == ECONNRESET) && core::Clock::now() < connect_deadline_) {
    // Closed before the HELLO went out: the same refusal as below, earlier.
    ::close(fd);
    socket_ = -1;
    retry_after_unanswered_locked();
    return;
  }
  if (error != 0) {
    fail_locked("sending HELLO to " + describe_peer() + " failed: " + std::strerror(error), WcStatus::RetryExcErr);
    return;
  }
  socket_connected_ = true;
  watch_socket_locked();
}

void ShmQp::retry_after_unanswered_locked() {
  ++unanswered_;
  socket_connected_ = false;
  retry_connect_at_ = core::Clock::now() + retry_backoff_;
  retry_backoff_ = std::min(retry_backoff_ * 2, kMaxConnectBackoff);
  RDMX_INFO("shm qp %u: %s closed the handshake unanswered (%d so far); connecting again", qpn_,
            describe_peer().c_str(), unanswered_);
}

void ShmQp::watch_socket_locked() {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = watch_tag(Watch::Qp, qpn_);
  ::epoll_ctl(device_.epoll_fd(), EPOLL_CTL_ADD, socket_, &ev);
}

void ShmQp::close_socket_locked() {
  if (memfd_ >= 0) {
    ::close(memfd_);
    memfd_ = -1;
  }
  // The connection is over: what we imported of the peer's memory is closed
  // now (a deregistration there may be waiting for it), not when the QP goes.
  drop_peer_regions_locked();
  if (offer_link_) offer_link_->detach_locked();
  if (socket_ < 0) return;
  ::epoll_ctl(device_.epoll_fd(), EPOLL_CTL_DEL, socket_, nullptr);
  ::close(socket_);
  socket_ = -1;
}

core::Offer ShmQp::offer_locked(const core::PendingConnection& pending) {
  state_held_by_device(device_lock_);
  ProbeRefresh refresh{this};
  if (!connect_requested_) return core::Offer::NotYet;
  // A QP already in ERROR still completes the handshake, then says Bye: the
  // peer must learn that our QP failed, not that our process died.
  if (initiator_ || socket_ >= 0 || !from_peer_locked(pending)) {
    return core::Offer::Refused;
  }
  accept_locked(pending);
  return core::Offer::Taken;
}

void ShmQp::accept_locked(const core::PendingConnection& pending) {
  Hello h;
  std::memcpy(&h, pending.hello.data(), sizeof(h));
  socket_ = pending.fd;
  peer_pid_ = peer_pid_of(socket_);
  int memfd = pending.carried_fd;
  Accept reply;
  std::string problem;
  struct stat st {};
  void* base = MAP_FAILED;
  if (h.ring_slots != kRingSlots || h.segment_bytes != segment_size(h.ring_slots)) {
    problem = "HELLO describes a segment of " + std::to_string(h.segment_bytes) + " bytes with " +
              std::to_string(h.ring_slots) + " slots per ring (this build uses " + std::to_string(kRingSlots) + ")";
    reply.error = EPROTO;
  } else if (::fstat(memfd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) < h.segment_bytes) {
    problem = "the shared segment is smaller than HELLO says";
    reply.error = EPROTO;
  } else if ((base = ::mmap(nullptr, h.segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0)) == MAP_FAILED) {
    reply.error = errno;
    problem = std::string("cannot map the shared segment: ") + std::strerror(errno);
  } else if (static_cast<SegmentHeader*>(base)->magic != kSegmentMagic ||
             static_cast<SegmentHeader*>(base)->version != kSegmentVersion) {
    reply.error = EPROTO;
    problem = "the shared segment does not carry rdmx's header";
  } else if (int probe = probe_cross_memory(peer_pid_, h.probe_addr, h.probe_value); probe != 0) {
    reply.error = probe;
    problem = cross_memory_hint(probe);
  }
  ::close(memfd);
  if (base != MAP_FAILED) {
    segment_ = base;
    segment_bytes_ = h.segment_bytes;
  }
  reply.probe_addr = reinterpret_cast<std::uint64_t>(&probe_value_);
  reply.probe_value = probe_value_;
  int sent = send_with_fd(socket_, &reply, sizeof(reply), -1);
  watch_socket_locked();
  if (reply.error != 0) {
    fail_locked("cannot attach to " + describe_peer() + " (pid " + std::to_string(peer_pid_) + "): " + problem,
                WcStatus::RetryExcErr);
    return;
  }
  // A failed answer (the initiator already closed) is not an error of
  // connect(): the socket's end of file fails the QP on the next pass.
  if (sent != 0) RDMX_INFO("shm qp %u: answering HELLO failed: %s", qpn_, std::strerror(sent));
  attach_segment_locked(segment_, false);
  accepted_ = true;
  if (state() == QpState::Error) {
    if (push_control_locked(RecordType::Bye, 0, 0)) wake_peer_locked();
    close_socket_locked();
    return;
  }
  RDMX_INFO("shm qp %u: connected to %s (pid %d), cross-memory attach verified", qpn_, peer_text_.c_str(), peer_pid_);
  pump_locked();
  wake_peer_locked();
}

bool ShmQp::take_accept_locked() {
  Accept reply;
  int fd = -1;
  int error = receive_with_fd(socket_, &reply, sizeof(reply), &fd);
  if (fd >= 0) ::close(fd);
  if (error == EAGAIN || error == EINTR) return false;
  if (error == ECONNRESET && core::Clock::now() < connect_deadline_) {
    // Closed without a reply: the peer's device refuses connections while
    // too many wait for their QP, and expects the initiator to come back.
    // A peer that is gone is found by the next attempt (its process, its
    // socket); the connect deadline bounds the attempts.
    ::epoll_ctl(device_.epoll_fd(), EPOLL_CTL_DEL, socket_, nullptr);
    ::close(socket_);
    socket_ = -1;
    retry_after_unanswered_locked();
    return true;
  }
  if (error != 0 || reply.magic != kAcceptMagic) {
    close_socket_locked();
    peer_gone_locked("connection closed by " + describe_peer() + " during the handshake" +
                         (error == ECONNRESET ? std::string() : std::string(": ") + std::strerror(error)),
                     true);
    return true;
  }
  if (reply.error != 0) {
    fail_locked(describe_peer() + " could not attach to this process: " + cross_memory_hint(reply.error),
                WcStatus::RetryExcErr);
    close_socket_locked();
    return true;
  }
  if (int probe = probe_cross_memory(peer_pid_, reply.probe_addr, reply.probe_value); probe != 0) {
    fail_locked(
        "cannot attach to " + describe_peer() + " (pid " + std::to_string(peer_pid_) + "): " + cross_memory_hint(probe),
        WcStatus::RetryExcErr);
    close_socket_locked();
    return true;
  }
  accepted_ = true;
  ::close(memfd_);
  memfd_ = -1;
  RDMX_INFO("shm qp %u: connected to %s (pid %d), cross-memory attach verified", qpn_, peer_text_.c_str(), peer_pid_);
  return true;
}

bool ShmQp::on_socket_locked(std::uint32_t events) {
  state_held_by_device(device_lock_);
  ProbeRefresh refresh{this};
  if (socket_ < 0) return false;
  bool closed = false;
  if (initiator_ && !accepted_ && (events & EPOLLIN) != 0) return take_accept_locked();
  if ((events & EPOLLIN) != 0) {
    // One-byte wake-ups (their only purpose was to end our epoll_wait) and region offers.
    for (int i = 0; i < 16; ++i) {
      ShareOffer offer;
      std::size_t got = 0;
      int fd = -1, second = -1;
      int error = receive_message(socket_, &offer, sizeof(offer), &got, &fd, &second);
      if (error == ECONNRESET) closed = true;
      if (error != 0) break;
      if (got == sizeof(offer) && offer.magic == kShareMagic && fd >= 0) {
        take_offer_locked(offer, fd, second);
      } else {
        if (fd >= 0) ::close(fd);
        if (second >= 0) ::close(second);
      }
    }
  }
  if ((events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR)) != 0) closed = true;
  if (closed) {
    poll_locked();  // what the peer put in the ring before it went (a NAK, answers) counts first
    close_socket_locked();
    peer_gone_locked("connection closed by " + describe_peer() + " (its process exited or destroyed the QP)", true);
  }
  return true;
}

void ShmQp::peer_gone_locked(const std::string& reason, bool receives_too) {
  // Nothing is copied directly any more: what we imported is closed now.
  drop_peer_regions_locked();
  if (state() == QpState::Error || !peer_gone_.empty()) return;
  if (!sq_.empty() || (receives_too && !rq_.empty())) return fail_locked(reason, WcStatus::RetryExcErr);
  peer_gone_ = reason;
  RDMX_INFO("shm qp %u: %s; the next work request fails", qpn_, reason.c_str());
}

bool ShmQp::on_timer_locked(core::Clock::time_point now) {
  state_held_by_device(device_lock_);
  ProbeRefresh refresh{this};
  if (!connect_requested_ || state() == QpState::Error || !peer_gone_.empty()) return false;
  bool busy = false;
  if (initiator_ && !socket_connected_) {
    busy = true;
    if (now >= retry_connect_at_) start_connect_locked();
    if (state() == QpState::Error) return false;
  }
  // Waiting for the peer to accept is a socket event; only the deadline is a
  // timer, and the idle engine's wake-up is often enough for it.
  if (!accepted_) {
    if (now >= connect_deadline_) {
      const std::string unanswered =
          unanswered_ == 0 ? ""
                           : "; it closed " + std::to_string(unanswered_) +
                                 " handshakes unanswered (too many connections waiting for their QP there, "
                                 "or a refusal its log names)";
      fail_locked(describe_peer() + " did not complete the connection within RDMX_TIMEOUT (" +
                      std::to_string(core::timeout().count()) + " ms)" + unanswered +
                      device_.descriptor_shortage_since(created_at_),
                  WcStatus::RetryExcErr);
      return false;
    }
  }
  // A SEND whose RNR clock runs may have got its receive since: the
  // responder then publishes `executed` at once, and this SEND completes
  // rather than fails.
  if (rnr_outstanding_ > 0) {
    complete_acknowledged_locked();
    if (state() == QpState::Error) return false;
  }
  // Only the oldest unacknowledged SEND can be held for want of a receive.
  for (std::size_t i = 0; i < sq_sent_; ++i) {
    SendEntry& e = sq_.at(i);
    if (!e.rnr_seen) continue;
    busy = true;
    if (now - e.first_rnr >= rnr_timeout_) {
      fail_locked("RNR retry exceeded: " + describe_peer() + " posted no receive for SEND wr_id " +
                      std::to_string(e.wr_id) + " within " + std::to_string(rnr_timeout_.count()) + " ms",
                  WcStatus::RnrRetryExcErr, e.msn);
      return false;
    }
    break;
  }
  return busy;
}

void ShmQp::protocol_error_locked(const std::string& what) {
  fail_locked("malformed data in the ring shared with " + describe_peer() + ": " + what +
                  " (a peer of another rdmx version, or memory corruption)",
              WcStatus::RemOpErr);
}

// ---------------------------------------------------------------------------
// Errors.

bool ShmQp::peer_left_in_order_locked(const std::string& reason) const {
  return reason.rfind("connection closed", 0) == 0;
}

void ShmQp::stop_peer_access_locked() {
  // We copy nothing more of the peer's memory either (a copy of ours that
  // failed ends here, so two QPs failing at once do not wait for each other).
  if (in_control_ != nullptr && in_control_->busy.load(std::memory_order_relaxed) != kNoPeerCopy) {
    end_peer_copy(*in_control_);
  }
  if (out_control_ == nullptr || socket_ < 0) return;
  RingControl* control = out_control_;
  control->closed.store(1, std::memory_order_seq_cst);
  if (control->busy.load(std::memory_order_seq_cst) != kCopyIntoProducer) return;
  // The peer is copying into our memory (a READ's answer): the buffer it
  // writes may be handed back to the application only once that copy is
  // over, or the peer process is gone. A copy out of our memory is not
  // waited for: the peer delivers nothing of it now (RingControl::closed).
  const int fd = socket_;
  auto copy_over = [control, fd] {
    if (control->busy.load(std::memory_order_acquire) != kCopyIntoProducer) return true;
    pollfd p{fd, POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR)) != 0;
  };
  core::WaitWord cleared(&control->busy_cleared);
  const auto result = core::wait_until(copy_over, &cleared, core::deadline_after(core::timeout()));
  if (result != core::WaitResult::Ready) {
    const std::string after = result == core::WaitResult::Aborted
                                  ? std::string("waits were aborted")
                                  : "RDMX_TIMEOUT (" + std::to_string(core::timeout().count()) + " ms)";
    RDMX_WARN(
        "shm qp %u: %s (pid %d) was still copying into this process's memory for a READ of this QP after %s; "
        "its flushed buffer may still change (a stopped or hung peer process)",
        qpn_, describe_peer().c_str(), peer_pid_, after.c_str());
  }
}

void ShmQp::error_entered_locked() {
  sq_sent_ = 0;
  ack_requests_outstanding_ = 0;
  rnr_outstanding_ = 0;
  // The peer learns of the error from the NAK (if any) and the socket's end of file.
  if (nak_pending_ && push_control_locked(RecordType::Nak, nak_msn_, static_cast<std::uint64_t>(nak_status_))) {
    nak_pending_ = false;
    wake_peer_locked();
  }
  if (!nak_pending_) {
    // Tell the peer its QP may live on (it fails only the work it has
    // outstanding); without this notice the closed socket means we died.
    if (push_control_locked(RecordType::Bye, 0, 0)) wake_peer_locked();
    close_socket_locked();
  }
}

}  // namespace rdmx::shm
