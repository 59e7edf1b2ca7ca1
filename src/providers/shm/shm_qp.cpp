// SPDX-License-Identifier: MIT
#include "providers/shm/shm_qp.hpp"

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
#include <random>

#include "core/ordered_placement.hpp"
#include "core/address_bundle.hpp"
#include "core/config.hpp"
#include "core/log.hpp"
#include "core/work_request.hpp"
#include "providers/shm/copy.hpp"
#include "providers/shm/cross_memory.hpp"
#include "core/asymmetric_fence.hpp"

namespace rdmx::shm {
namespace {

using core::consumes_receive;
using core::hex;
using core::msn_before;
using core::needs_response;

// Refreshes the QP's probe when the locked section it guards ends.
template <class Qp>
struct ProbeRefresh {
  Qp* qp;
  ~ProbeRefresh() { qp->update_probe_locked(); }
};

// Ring slots per direction: 4096 x 64 B = 256 KiB, room for 16 eager messages of 16 KiB.
constexpr std::uint32_t kRingSlots = 4096;
constexpr int kRecordBudget = 64;  // records consumed per pass and QP
constexpr auto kMaxConnectBackoff = std::chrono::milliseconds(100);
// Unrequested acknowledgements go out after this many requests: writing the
// shared `executed` word on every message would move its cache line between
// the processes twice per message.
constexpr std::uint32_t kAckBatch = 32;

bool is_request(RecordType t) {
  return t == RecordType::Send || t == RecordType::Write || t == RecordType::Read || t == RecordType::FetchAdd ||
         t == RecordType::CmpSwap;
}

int peer_pid_of(int socket) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return -1;
  return cred.pid;
}

// The initiator's buffers listed in a cross-memory record (its count was
// checked against kMaxSge when the record was accepted), as iovecs.
int remote_iovecs(const Record* r, iovec* out) {
  const auto* list = reinterpret_cast<const RemoteIov*>(RingConsumer::payload(r));
  const auto count = static_cast<int>(r->arg1);
  for (int i = 0; i < count; ++i) {
    RemoteIov piece;
    std::memcpy(&piece, list + i, sizeof(piece));
    out[i] = {reinterpret_cast<void*>(piece.addr), piece.length};
  }
  return count;
}

std::uint64_t covered(const iovec* iov, int count) {
  std::uint64_t sum = 0;
  for (int i = 0; i < count; ++i) sum += iov[i].iov_len;
  return sum;
}

// The local pieces [offset, offset+length) of an SGE list, as iovecs.
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
}  // namespace

// ---------------------------------------------------------------------------
// Construction and verbs.

ShmQp::ShmQp(ShmDevice& device, core::RegistryProtectionDomain& pd, core::CompletionRing& send_cq,
             core::CompletionRing& recv_cq, const QpCaps& caps)
    : SoftRcQp("shm", device.next_qpn(), kMaxMessage, pd, send_cq, recv_cq,
               core::grant_qp_caps(caps, device.caps(), "shm")),
      device_(device),
      eager_(eager_limit()),
      probe_value_(std::random_device{}() | 1ull << 40) {
  std::lock_guard lock(device_.mutex());
  device_.add_qp_locked(this);
  probe_ = device_.claim_probe_locked();
}

ShmQp::~ShmQp() {
  std::lock_guard lock(device_.mutex());
  device_.remove_qp_locked(this);
  device_.release_probe_locked(probe_);
  close_socket_locked();
  while (!peer_regions_.empty()) drop_peer_region_locked(peer_regions_.size() - 1);
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

QpAddress ShmQp::local_address() const {
  ShmAddress self;
  self.boot_id = HostIdentity::self().boot_id;
  self.pid_namespace = HostIdentity::self().pid_namespace;
  self.pid = static_cast<std::uint32_t>(::getpid());
  self.qpn = qpn_;
  self.nonce = device_.nonce();
  self.socket_path = device_.socket_path();
  return self.encode();
}

void ShmQp::lock_state() { device_.mutex().lock(); }

void ShmQp::unlock_state() {
  update_probe_locked();
  device_.mutex().unlock();
}

void ShmQp::connect(const QpAddress& remote, const ConnectOptions& options) {
  // An auto peer offers one address per provider: take ours.
  ShmAddress peer = ShmAddress::decode(core::part_for_provider(remote, ShmAddress::is_shm));
  std::string why;
  if (!reachable(peer, &why)) {
    throw Error(ErrorCode::InvalidArgument, "the shm provider cannot reach this peer: " + why,
                {.op = "connect", .peer_rank = options.peer_rank, .peer_addr = peer.to_string(),
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
    ShmDevice::PendingHello hello;
    if (device_.claim_pending_locked(qpn_, peer.qpn, peer.nonce, &hello)) accept_locked(hello);
  }
}

bool ShmQp::post_direct_locked(const SendWr& wr, std::uint64_t total) {
  // One-sided: a WRITE or READ with nothing queued ahead of it, on a region
  // the peer shared, is copied here and completes at once, without the
  // peer's threads and without a send-queue entry.
  if (!sq_.empty() || peer_regions_.empty() || !peer_gone_.empty() ||
      (wr.opcode != Opcode::RdmaWrite && wr.opcode != Opcode::RdmaRead) || !direct_locals_ok_locked(wr) ||
      !try_direct_locked(wr, total)) {
    return false;
  }
  if (wr.signaled) push_send_completion_locked(wr.wr_id, wr.opcode, total, WcStatus::Success);
  return true;
}

void ShmQp::send_queued_locked(SendEntry&) {
  if (!peer_gone_.empty()) return fail_locked(peer_gone_, WcStatus::RetryExcErr);
  device_.note_application_activity();
  pump_locked();
}

bool ShmQp::direct_locals_ok_locked(const SendWr& wr) {
  const Access need = wr.opcode == Opcode::RdmaRead ? Access::LocalWrite : Access::None;
  for (const Sge& sge : wr.sg_list) {
    if (local_key_.check(pd_.registry(), false, &pd_, sge.lkey, sge.addr, sge.length, need) != core::AccessCheck::Ok) {
      return false;  // the ordinary path reports it
    }
  }
  return true;
}

bool ShmQp::try_direct_locked(const SendWr& wr, std::uint64_t total) {
  const bool write = wr.opcode == Opcode::RdmaWrite;
  for (std::size_t i = 0; i < peer_regions_.size(); ++i) {
    PeerRegion& r = peer_regions_[i];
    if (r.rkey != wr.rkey) continue;
    if (!has(r.access, write ? Access::RemoteWrite : Access::RemoteRead) || wr.remote_addr < r.base ||
        total > r.length || wr.remote_addr - r.base > r.length - total) {
      return false;  // the peer's region table gives the verdict on the ring path
    }
    // Mark ourselves busy before looking at `live`: deregistration clears
    // `live`, then waits for busy slots (see core::SharedRegionState).
    r.busy->store(1, std::memory_order_relaxed);
    core::light_fence(device_.asymmetric_fence());
    if (r.state->live.load(std::memory_order_relaxed) == 0) {
      r.busy->store(0, std::memory_order_release);
      drop_peer_region_locked(i);
      return false;
    }
    char* remote = r.map + (wr.remote_addr - r.base);
    // A WRITE's last word is stored last (DeviceCaps::ordered_write_placement).
    const bool hold = write && core::has_last_word(wr.remote_addr, total);
    const std::uint64_t before_tail = hold ? total - 8 : total;
    char tail[8];
    std::uint64_t at = 0;
    for (const Sge& sge : wr.sg_list) {
      auto* local = reinterpret_cast<char*>(sge.addr);
      const std::uint64_t now = at < before_tail ? std::min<std::uint64_t>(sge.length, before_tail - at) : 0;
      if (now <= 64) {  // the latency case: no detour through the large-copy machinery
        std::memcpy(write ? remote : local, write ? local : remote, now);
      } else if (write) {
        device_.copier().copy(remote, local, now);
      } else {
        device_.copier().copy(local, remote, now);
      }
      if (now < sge.length) std::memcpy(tail + (at + now - before_tail), local + now, sge.length - now);
      remote += sge.length;
      at += sge.length;
    }
    if (hold) core::store_last_word(remote - 8, tail);
    r.busy->store(0, std::memory_order_release);
    return true;
  }
  return false;
}

void ShmQp::offer_region_locked(std::uint32_t rkey, const core::MemoryRegistry::Verdict& verdict) {
  if (verdict.shared == nullptr || socket_ < 0 || !accepted_) return;
  if (std::find(offered_.begin(), offered_.end(), rkey) != offered_.end()) return;
  offered_.push_back(rkey);
  const std::uint32_t slot = verdict.shared->slots_given.fetch_add(1);
  if (slot >= core::kDirectSlots) return;  // every slot taken: this peer keeps using the ring
  ShareOffer offer;
  offer.rkey = rkey;
  offer.base = verdict.base;
  offer.length = verdict.length;
  offer.map_length = verdict.shared->map_length;
  offer.state_offset = verdict.shared->state_offset;
  offer.access = static_cast<std::uint32_t>(verdict.access);
  offer.slot = slot;
  if (int error = send_with_fd(socket_, &offer, sizeof(offer), verdict.shared->memfd); error != 0) {
    RDMX_INFO("shm qp %u: offering region rkey 0x%x to %s failed: %s", qpn_, rkey, describe_peer().c_str(),
              std::strerror(error));
  }
}

void ShmQp::take_offer_locked(const ShareOffer& offer, int fd) {
  struct stat st {};
  const bool sane = offer.state_offset >= offer.length &&
                    offer.map_length >= offer.state_offset + sizeof(core::SharedRegionState) &&
                    offer.slot < core::kDirectSlots &&
                    ::fstat(fd, &st) == 0 && static_cast<std::uint64_t>(st.st_size) >= offer.map_length;
  // Page tables filled now rather than page by page inside the copies.
  void* map = sane ? ::mmap(nullptr, offer.map_length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0)
                   : MAP_FAILED;
  ::close(fd);
  if (map == MAP_FAILED) {
    RDMX_WARN("shm qp %u: cannot map the region rkey 0x%x offered by %s; its WRITEs and READs keep using the ring",
              qpn_, offer.rkey, describe_peer().c_str());
    return;
  }
  for (std::size_t i = 0; i < peer_regions_.size(); ++i) {
    if (peer_regions_[i].rkey == offer.rkey) {
      drop_peer_region_locked(i);
      break;
    }
  }
  auto* base = static_cast<char*>(map);
  auto* state = reinterpret_cast<core::SharedRegionState*>(base + offer.state_offset);
  peer_regions_.push_back({offer.rkey, offer.base, offer.length, static_cast<Access>(offer.access), base,
                           offer.map_length, state, &state->slots[offer.slot].busy});
  RDMX_TRACE("shm qp %u: mapped %s's region rkey 0x%x (%llu bytes) for direct access", qpn_,
             describe_peer().c_str(), offer.rkey, static_cast<unsigned long long>(offer.length));
}

void ShmQp::drop_peer_region_locked(std::size_t index) {
  ::munmap(peer_regions_[index].map, peer_regions_[index].map_length);
  peer_regions_.erase(peer_regions_.begin() + static_cast<std::ptrdiff_t>(index));
}

void ShmQp::recv_queued_locked() {
  if (!peer_gone_.empty()) return fail_locked(peer_gone_, WcStatus::WrFlushErr);
  // A SEND held for want of a receive can go now, without waiting for the engine.
  if (rnr_nak_sent_) poll_locked();
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
  hello.target_nonce = remote_.nonce;
  hello.target_qpn = remote_.qpn;
  hello.source_qpn = qpn_;
  hello.source_nonce = device_.nonce();
  hello.segment_bytes = segment_bytes_;
  hello.ring_slots = kRingSlots;
  hello.probe_addr = reinterpret_cast<std::uint64_t>(&probe_value_);
  hello.probe_value = probe_value_;
  int error = send_with_fd(fd, &hello, sizeof(hello), memfd_);
  ::close(memfd_);
  memfd_ = -1;
  if (error != 0) {
    fail_locked("sending HELLO to " + describe_peer() + " failed: " + std::strerror(error), WcStatus::RetryExcErr);
    return;
  }
  socket_connected_ = true;
  watch_socket_locked();
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
  if (socket_ < 0) return;
  ::epoll_ctl(device_.epoll_fd(), EPOLL_CTL_DEL, socket_, nullptr);
  ::close(socket_);
  socket_ = -1;
}

ShmQp::Offer ShmQp::offer_locked(const ShmDevice::PendingHello& hello) {
  ProbeRefresh<ShmQp> refresh{this};
  if (!connect_requested_) return Offer::NotYet;
  // A QP already in ERROR still completes the handshake, then says Bye: the
  // peer must learn that our QP failed, not that our process died.
  if (initiator_ || socket_ >= 0 || remote_.qpn != hello.hello.source_qpn ||
      remote_.nonce != hello.hello.source_nonce) {
    return Offer::Refused;
  }
  accept_locked(hello);
  return Offer::Taken;
}

void ShmQp::accept_locked(const ShmDevice::PendingHello& pending) {
  const Hello& h = pending.hello;
  socket_ = pending.socket;
  peer_pid_ = peer_pid_of(socket_);
  int memfd = pending.memfd;
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

bool ShmQp::on_socket_locked(std::uint32_t events) {
  ProbeRefresh<ShmQp> refresh{this};
  if (socket_ < 0) return false;
  bool closed = false;
  if (initiator_ && !accepted_ && (events & EPOLLIN) != 0) {
    Accept reply;
    int fd = -1;
    int error = receive_with_fd(socket_, &reply, sizeof(reply), &fd);
    if (fd >= 0) ::close(fd);
    if (error == EAGAIN || error == EINTR) return false;
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
      fail_locked("cannot attach to " + describe_peer() + " (pid " + std::to_string(peer_pid_) +
                      "): " + cross_memory_hint(probe),
                  WcStatus::RetryExcErr);
      close_socket_locked();
      return true;
    }
    accepted_ = true;
    RDMX_INFO("shm qp %u: connected to %s (pid %d), cross-memory attach verified", qpn_, peer_text_.c_str(),
              peer_pid_);
    return true;
  }
  if ((events & EPOLLIN) != 0) {
    // One-byte wake-ups (their only purpose was to end our epoll_wait) and region offers.
    for (int i = 0; i < 16; ++i) {
      ShareOffer offer;
      std::size_t got = 0;
      int fd = -1;
      int error = receive_message(socket_, &offer, sizeof(offer), &got, &fd);
      if (error == ECONNRESET) closed = true;
      if (error != 0) break;
      if (got == sizeof(offer) && offer.magic == kShareMagic && fd >= 0) {
        take_offer_locked(offer, fd);
      } else if (fd >= 0) {
        ::close(fd);
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
  if (state() == QpState::Error || !peer_gone_.empty()) return;
  if (!sq_.empty() || (receives_too && !rq_.empty())) return fail_locked(reason, WcStatus::RetryExcErr);
  peer_gone_ = reason;
  RDMX_INFO("shm qp %u: %s; the next work request fails", qpn_, reason.c_str());
}

bool ShmQp::on_timer_locked(core::Clock::time_point now) {
  ProbeRefresh<ShmQp> refresh{this};
  if (!connect_requested_ || state() == QpState::Error || !peer_gone_.empty()) return false;
  bool busy = false;
  if (initiator_ && !socket_connected_) {
    busy = true;
    if (now >= retry_connect_at_) start_connect_locked();
    if (state() == QpState::Error) return false;
  }
  if (!accepted_) {
    busy = true;
    if (now >= connect_deadline_) {
      fail_locked(describe_peer() + " did not complete the connection within RDMX_TIMEOUT (" +
                      std::to_string(core::timeout().count()) + " ms)",
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

bool ShmQp::has_input_locked() const {
  if (!in_.attached() || state() == QpState::Error) return false;
  if (rnr_nak_sent_ && rq_.empty()) {
    // The request at the head waits for a receive: what arrives behind it counts.
    const std::uint64_t head = in_.position();
    if (in_.peek(skimmed_to_ > head ? skimmed_to_ - head : 0) != nullptr) return true;
  } else if (in_.peek() != nullptr) {
    return true;
  }
  if (sq_sent_ > 0 && ack_wanted_locked()) {
    std::uint32_t executed = out_control_->executed.load(std::memory_order_acquire);
    if (msn_before(sq_.front().msn, executed)) return true;
  }
  return false;
}

void ShmQp::set_sleeping_locked(bool sleeping) {
  if (in_control_ != nullptr && state() != QpState::Error) {
    in_control_->sleeping.store(sleeping ? 1 : 0, std::memory_order_relaxed);
  }
}

void ShmQp::wake_peer_locked() {
  if (out_control_ == nullptr || socket_ < 0) return;
  // Pairs with the sleeper's fence: it sees our records, or we see its mark.
  core::light_fence(device_.asymmetric_fence());
  if (out_control_->sleeping.load(std::memory_order_relaxed) != 0 &&
      out_control_->sleeping.exchange(0, std::memory_order_acq_rel) != 0) {
    char byte = 'w';
    [[maybe_unused]] auto ignored = ::send(socket_, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  }
}

// ---------------------------------------------------------------------------
// The pass.

std::size_t ShmQp::poll_locked() {
  ProbeRefresh<ShmQp> refresh{this};
  if (!in_.attached()) return 0;
  std::size_t did = 0;
  bool published = false;
  if (nak_pending_ && push_control_locked(RecordType::Nak, nak_msn_, static_cast<std::uint64_t>(nak_status_))) {
    nak_pending_ = false;
    push_control_locked(RecordType::Bye, 0, 0);
    wake_peer_locked();
    close_socket_locked();
    return 1;
  }
  if (state() == QpState::Error) return 0;
  for (int budget = kRecordBudget; budget > 0; --budget) {
    const Record* r = in_.peek();
    if (r == nullptr) break;
    const RecordType type = r->type;
    const std::uint16_t slots = r->slots;
    Step step;
    if (type == RecordType::Pad) {
      if (slots != in_.slots_to_end()) {
        protocol_error_locked("PAD record of " + std::to_string(slots) + " slots does not end at the ring's end");
        return did;
      }
      step = Step::Done;
    } else if (is_request(type)) {
      step = execute_request_locked(r, slots);
      if (step == Step::Done) published = true;
      if (step == Step::Stall) skim_locked(slots);
    } else if (in_.position() < skimmed_to_) {
      step = Step::Done;  // handled by skim_locked() while a request ahead of it waited
    } else {
      step = handle_response_locked(r, slots, 0);
    }
    if (step != Step::Done) break;
    in_.pop(slots);
    ++did;
  }
  if (state() == QpState::Error) return did + 1;
  publish_acks_locked(false);
  complete_acknowledged_locked();
  pump_locked();
  if (published) wake_peer_locked();
  return did;
}

void ShmQp::skim_locked(std::uint16_t held_slots) {
  // The two directions of a QP are independent, as on InfiniBand: a SEND of
  // the peer that waits for our receive must not hold up the answers to our
  // READs and atomics, or NAKs, behind it in the ring. They are handled
  // here, in ring order, and popped later with the request ahead of them;
  // requests wait their turn.
  const std::uint64_t head = in_.position();
  std::uint64_t offset = std::max<std::uint64_t>(held_slots, skimmed_to_ > head ? skimmed_to_ - head : 0);
  skimmed_to_ = head + offset;
  for (int budget = kRecordBudget; budget > 0 && state() != QpState::Error; --budget) {
    const Record* r = in_.peek(offset);
    if (r == nullptr) return;
    const RecordType type = r->type;
    const std::uint16_t slots = r->slots;
    if (type == RecordType::Pad) {
      if (slots != in_.slots_to_end(offset)) {
        protocol_error_locked("PAD record of " + std::to_string(slots) + " slots does not end at the ring's end");
        return;
      }
    } else if (!in_.well_formed(slots, 0, offset)) {
      protocol_error_locked("record of " + std::to_string(slots) + " slots does not fit the ring");
      return;
    } else if (!is_request(type) && handle_response_locked(r, slots, offset) != Step::Done) {
      return;
    }
    offset += slots;
    skimmed_to_ = head + offset;
  }
}

void ShmQp::publish_acks_locked(bool force) {
  if (!in_.attached() || state() == QpState::Error) return;
  const std::uint32_t unpublished = expected_msn_ - published_msn_;
  if (unpublished != 0 && (force || ack_now_ || unpublished >= kAckBatch)) {
    in_.flush();
    in_control_->executed.store(expected_msn_, std::memory_order_release);
    published_msn_ = expected_msn_;
    ack_now_ = false;
    wake_peer_locked();
  } else if (force || in_.unflushed() * 4 >= kRingSlots) {
    in_.flush();
  }
}

// ---------------------------------------------------------------------------
// Requester.

void ShmQp::pump_locked() {
  if (!out_.attached() || state() == QpState::Error) return;
  bool put = false;
  while (sq_sent_ < sq_.size()) {
    SendEntry& e = sq_.at(sq_sent_);
    if (!put_request_locked(e)) break;
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
  r->flags = static_cast<std::uint8_t>((cross ? kCrossMemory : 0) |
                                       (e.opcode == Opcode::SendWithImm || e.opcode == Opcode::RdmaWriteWithImm
                                            ? kWithImm
                                            : 0));
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
  auto bad = [&](const std::string& what) {
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
        if (done.signaled) push_send_completion_locked(done, WcStatus::Success);
        retire_head_locked();
      }
      const auto status = static_cast<WcStatus>(arg0);
      fail_locked(describe_peer() + " refused request msn " + std::to_string(msn) + " (" + to_string(e->opcode) +
                      " wr_id " + std::to_string(e->wr_id) + "): " + to_string(status),
                  status, msn);
      return Step::Failed;
    }
    case RecordType::Bye:
      peer_gone_locked(describe_peer() + "'s QP entered ERROR", false);
      return Step::Done;
    default:
      return bad("unknown record type " + std::to_string(static_cast<int>(type)));
  }
}

// ---------------------------------------------------------------------------
// Responder.

ShmQp::Step ShmQp::execute_request_locked(const Record* r, std::uint16_t slots) {
  const RecordType type = r->type;
  const std::uint8_t flags = r->flags;
  const std::uint32_t msn = r->msn;
  const std::uint32_t length = r->length;
  if (msn != expected_msn_) {
    protocol_error_locked("request msn " + std::to_string(msn) + " where " + std::to_string(expected_msn_) +
                          " was expected");
    return Step::Failed;
  }
  const bool cross = (flags & kCrossMemory) != 0;
  const std::uint64_t iov_count = cross ? r->arg1 : 0;
  const bool payload_op = type == RecordType::Send || type == RecordType::Write;
  std::size_t payload = cross ? iov_count * sizeof(RemoteIov) : (payload_op ? length : 0);
  if (iov_count > kMaxSge || (cross && type != RecordType::Send && type != RecordType::Write &&
                              type != RecordType::Read) ||
      !in_.well_formed(slots, payload)) {
    protocol_error_locked("malformed " + std::to_string(static_cast<int>(type)) + " request record (msn " +
                          std::to_string(msn) + ", " + std::to_string(slots) + " slots, length " +
                          std::to_string(length) + ")");
    return Step::Failed;
  }
  const bool with_imm = (flags & kWithImm) != 0;
  const bool consumes_recv = type == RecordType::Send || (type == RecordType::Write && with_imm);
  if (consumes_recv && rq_.empty()) {
    // RNR: hold the request until a receive is posted; the requester's clock decides when to give up.
    if (!rnr_nak_sent_) {
      if (!push_control_locked(RecordType::RnrNak, msn, 0)) return Step::Stall;
      rnr_nak_sent_ = true;
      wake_peer_locked();
    }
    return Step::Stall;
  }
  Step step = Step::Done;
  switch (type) {
    case RecordType::Send:
    case RecordType::Write: {
      RecvEntry recv{};
      if (consumes_recv) recv = rq_.front();
      step = deliver_locked(r, consumes_recv ? &recv : nullptr, r->remote_addr, type == RecordType::Send);
      if (step != Step::Done) return step;
      if (consumes_recv) {
        rq_.pop();
        push_recv_completion_locked(recv, WcStatus::Success,
                                    type == RecordType::Send ? WcOpcode::Recv : WcOpcode::RecvRdmaWithImm, length,
                                    with_imm, r->imm);
      }
      break;
    }
    case RecordType::Read: step = answer_read_locked(r); break;
    case RecordType::FetchAdd:
    case RecordType::CmpSwap: step = answer_atomic_locked(r); break;
    default: break;
  }
  if (step != Step::Done) return step;
  // A region from allocate_memory() is offered to the peer the first time it
  // uses it, so its later WRITEs and READs go there directly.
  if ((type == RecordType::Write || type == RecordType::Read) && length > 0) {
    if (!cross) {
      if (remote_key_.verdict().shared != nullptr) offer_region_locked(r->rkey, remote_key_.verdict());
    } else if (core::MemoryRegistry::Verdict v; pd_.registry().lookup(true, r->rkey, &v)) {
      offer_region_locked(r->rkey, v);
    }
  }
  // A SEND held for want of a receive has an RNR clock running at the
  // requester: say at once that it ran, so the clock stops.
  if ((flags & kAckRequest) != 0 || rnr_nak_sent_) ack_now_ = true;
  rnr_nak_sent_ = false;
  ++expected_msn_;
  return Step::Done;
}

ShmQp::Step ShmQp::deliver_locked(const Record* r, const RecvEntry* recv, std::uint64_t target_addr, bool to_recv) {
  const std::uint32_t msn = r->msn;
  const std::uint32_t length = r->length;
  const std::uint32_t rkey = r->rkey;
  const bool cross = (r->flags & kCrossMemory) != 0;
  iovec local[kMaxSge];
  int local_count = 0;
  WcStatus recv_status = WcStatus::Success;
  WcStatus nak_status = WcStatus::Success;
  std::string why;
  {
    // Cross-memory copies can be long: they hold the registry's lock, which
    // deregistration waits for; inline copies rely on the cached verdicts.
    std::shared_lock<std::shared_mutex> lock;
    if (cross) lock = pd_.registry().read_lock();
    auto check = [&](bool remote, std::uint32_t key, std::uint64_t addr, std::uint64_t len, Access need) {
      return cross ? pd_.registry().check_locked(remote, &pd_, key, addr, len, need)
                   : (remote ? remote_key_ : local_key_).check(pd_.registry(), remote, &pd_, key, addr, len, need);
    };
    if (to_recv) {
      if (length > recv->capacity) {
        recv_status = WcStatus::LocLenErr;
        nak_status = WcStatus::RemInvReqErr;
        why = "SEND of " + std::to_string(length) + " bytes into a receive of " + std::to_string(recv->capacity);
      } else {
        local_count = sge_iovecs(recv->sges, recv->num_sge, length, local);
        for (int i = 0; i < local_count; ++i) {
          auto verdict = check(false, recv->sges[i].lkey, reinterpret_cast<std::uint64_t>(local[i].iov_base),
                               local[i].iov_len, Access::LocalWrite);
          if (verdict != core::AccessCheck::Ok) {
            recv_status = WcStatus::LocProtErr;
            nak_status = WcStatus::RemOpErr;
            why = "receive wr_id " + std::to_string(recv->wr_id) + " SGE " + std::to_string(i) + ": " +
                  core::to_string(verdict);
            break;
          }
        }
      }
    } else if (length > 0) {
      auto verdict = check(true, rkey, target_addr, length, Access::RemoteWrite);
      if (verdict != core::AccessCheck::Ok) {
        nak_status = WcStatus::RemAccessErr;
        why = "WRITE of " + std::to_string(length) + " bytes to " + hex(target_addr) + " rkey " + hex(rkey) + ": " +
              core::to_string(verdict);
      } else {
        local[0] = {reinterpret_cast<void*>(target_addr), length};
        local_count = 1;
      }
    }
    if (nak_status == WcStatus::Success && length > 0) {
      // A WRITE's last word is stored last (DeviceCaps::ordered_write_placement).
      const bool hold = !to_recv && core::has_last_word(target_addr, length);
      if (!cross) {
        const std::uint8_t* from = RingConsumer::payload(r);
        for (int i = 0; i < local_count; ++i) {
          if (hold && i == local_count - 1) {
            core::copy_last_word_last(local[i].iov_base, from, local[i].iov_len);
          } else {
            std::memcpy(local[i].iov_base, from, local[i].iov_len);
          }
          from += local[i].iov_len;
        }
      } else {
        iovec remote[kMaxSge];
        const int count = remote_iovecs(r, remote);
        const std::uint64_t sum = covered(remote, count);
        if (sum != length) {
          nak_status = WcStatus::RemInvReqErr;
          why = "the request's buffer list covers " + std::to_string(sum) + " bytes, not " + std::to_string(length);
        } else {
          // Held back: the last word comes into `tail` and is stored after the rest.
          char tail[8];
          iovec* last = &local[local_count - 1];
          if (hold) last->iov_len -= 8;
          const std::uint64_t body = hold ? length - 8 : length;
          ssize_t n = read_from_process(peer_pid_, local, local_count, remote, count, body);
          if (hold && n == static_cast<ssize_t>(body)) {
            iovec tail_iov{tail, 8};
            iovec from_iov[kMaxSge];
            const int from_count = tail_iovecs(remote, count, body, from_iov);
            if (read_from_process(peer_pid_, &tail_iov, 1, from_iov, from_count, 8) == 8) {
              core::store_last_word(static_cast<char*>(last->iov_base) + last->iov_len, tail);
              n += 8;
            }
          }
          if (n != static_cast<ssize_t>(length)) {
            int error = n < 0 ? errno : EFAULT;
            nak_status = WcStatus::RemOpErr;
            why = "copying " + std::to_string(length) + " bytes from pid " + std::to_string(peer_pid_) +
                  " failed after " + std::to_string(n < 0 ? 0 : n) + ": " + std::strerror(error);
          }
        }
      }
    }
  }
  if (nak_status == WcStatus::Success) return Step::Done;
  if (recv != nullptr && recv_status != WcStatus::Success) {
    rq_.pop();
    push_recv_completion_locked(*recv, recv_status, WcOpcode::Recv, 0, false, 0);
  }
  nak_locked(msn, nak_status, why);
  return Step::Failed;
}

ShmQp::Step ShmQp::answer_read_locked(const Record* r) {
  const std::uint32_t msn = r->msn;
  const std::uint32_t length = r->length;
  const std::uint64_t addr = r->remote_addr;
  const std::uint32_t rkey = r->rkey;
  const bool cross = (r->flags & kCrossMemory) != 0;
  Record* answer = out_.reserve(cross ? 0 : length);
  if (answer == nullptr) return Step::Stall;
  std::string why;
  WcStatus nak_status = WcStatus::Success;
  {
    std::shared_lock<std::shared_mutex> lock;
    if (cross) lock = pd_.registry().read_lock();
    auto verdict = length == 0 ? core::AccessCheck::Ok
                   : cross     ? pd_.registry().check_locked(true, &pd_, rkey, addr, length, Access::RemoteRead)
                               : remote_key_.check(pd_.registry(), true, &pd_, rkey, addr, length, Access::RemoteRead);
    if (verdict != core::AccessCheck::Ok) {
      nak_status = WcStatus::RemAccessErr;
      why = "READ of " + std::to_string(length) + " bytes at " + hex(addr) + " rkey " + hex(rkey) + ": " +
            core::to_string(verdict);
    } else if (!cross) {
      if (length > 0) std::memcpy(answer->data, reinterpret_cast<const void*>(addr), length);
    } else {
      iovec local{reinterpret_cast<void*>(addr), length};
      iovec remote[kMaxSge];
      const int count = remote_iovecs(r, remote);
      const std::uint64_t sum = covered(remote, count);
      ssize_t n = sum == length ? write_to_process(peer_pid_, &local, 1, remote, count, length) : -2;
      if (n != static_cast<ssize_t>(length)) {
        nak_status = WcStatus::RemOpErr;
        why = n == -2 ? "the READ's buffer list does not cover its length"
                      : "copying the READ answer into pid " + std::to_string(peer_pid_) +
                            " failed: " + std::strerror(n < 0 ? errno : EFAULT);
      }
    }
  }
  if (nak_status != WcStatus::Success) {
    nak_locked(msn, nak_status, why);
    return Step::Failed;
  }
  answer->type = RecordType::ReadResponse;
  answer->flags = cross ? kCrossMemory : 0;
  answer->msn = msn;
  answer->length = length;
  out_.publish(answer);
  return Step::Done;
}

ShmQp::Step ShmQp::answer_atomic_locked(const Record* r) {
  const std::uint32_t msn = r->msn;
  const std::uint64_t addr = r->remote_addr;
  const std::uint32_t rkey = r->rkey;
  const std::uint64_t compare_add = r->arg0;
  const std::uint64_t swap = r->arg1;
  const bool fetch_add = r->type == RecordType::FetchAdd;
  if (addr % 8 != 0) {
    nak_locked(msn, WcStatus::RemInvReqErr, "atomic at unaligned address " + hex(addr));
    return Step::Failed;
  }
  Record* answer = out_.reserve(0);
  if (answer == nullptr) return Step::Stall;
  std::uint64_t old = 0;
  // Hardware atomics on the target's memory, as the tcp provider's: atomic
  // with respect to every other atomic on this host, whichever provider issued it.
  auto verdict = remote_key_.check(pd_.registry(), true, &pd_, rkey, addr, 8, Access::RemoteAtomic);
  if (verdict == core::AccessCheck::Ok) {
    std::atomic_ref<std::uint64_t> target(*reinterpret_cast<std::uint64_t*>(addr));
    if (fetch_add) {
      old = target.fetch_add(compare_add, std::memory_order_seq_cst);
    } else {
      old = compare_add;
      target.compare_exchange_strong(old, swap, std::memory_order_seq_cst);
    }
  }
  if (verdict != core::AccessCheck::Ok) {
    nak_locked(msn, WcStatus::RemAccessErr,
               std::string(fetch_add ? "FETCH_ADD" : "CMP_SWAP") + " at " + hex(addr) + " rkey " + hex(rkey) + ": " +
                   core::to_string(verdict));
    return Step::Failed;
  }
  answer->type = RecordType::AtomicResponse;
  answer->msn = msn;
  answer->length = 8;
  answer->arg0 = old;
  out_.publish(answer);
  return Step::Done;
}

bool ShmQp::push_control_locked(RecordType type, std::uint32_t msn, std::uint64_t arg0) {
  if (!out_.attached()) return false;
  Record* r = out_.reserve(0);
  if (r == nullptr) return false;
  r->type = type;
  r->msn = msn;
  r->length = 0;
  r->arg0 = arg0;
  out_.publish(r);
  return true;
}

void ShmQp::nak_locked(std::uint32_t msn, WcStatus status, const std::string& why) {
  nak_pending_ = true;
  nak_msn_ = msn;
  nak_status_ = status;
  // As in IB, the responder's QP fails too; the NAK goes out before the socket closes.
  fail_locked("refused request msn " + std::to_string(msn) + " from " + describe_peer() + ": " + why,
              WcStatus::WrFlushErr);
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
