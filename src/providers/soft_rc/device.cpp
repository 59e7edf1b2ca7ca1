// SPDX-License-Identifier: MIT
#include "providers/soft_rc/device.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "driver/completion_queue.hpp"
#include "driver/memory_registry.hpp"
#include "providers/soft_rc/qp.hpp"
#include "services/auth.hpp"
#include "services/config.hpp"
#include "services/kernel_random.hpp"
#include "services/log.hpp"
#include "services/mutex.hpp"

namespace rdmx::core {
namespace {

constexpr std::size_t kMaxPendingConnections = 1024;
// Accepts per pass: HELLOs already sent on accepted connections are read
// before a burst of new ones can fill the table.
constexpr int kAcceptBatch = 64;
// With the table full, a connection that sent no HELLO for this long makes
// room; a younger one may be a real peer whose engine is busy answering a
// burst of challenges, so the newcomer is closed instead (unanswered: its
// connector retries until RDMX_TIMEOUT).
constexpr auto kEvictSilentAfter = std::chrono::seconds(1);
// A real peer sends its HELLO one round trip after connecting; a connection
// silent for this long (or RDMX_TIMEOUT, if shorter) is closed.
constexpr auto kHelloBound = std::chrono::seconds(10);
// How long the listener rests when the process is out of descriptors.
constexpr auto kAcceptRetry = std::chrono::milliseconds(100);

}  // namespace

SoftRcDevice::SoftRcDevice(const ProviderDescriptor& descriptor, DeviceResources resources, std::uint64_t max_message,
                           bool remote_peers, bool direct_registered_writes, CudaMemorySupport cuda_memory)
    : provider_(descriptor.name),
      figures_(descriptor.figures),
      max_message_(max_message),
      remote_peers_(remote_peers),
      direct_registered_writes_(direct_registered_writes),
      cuda_memory_(cuda_memory),
      resources_(std::move(resources)) {
  nonce_ = kernel_random64();
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    const int saved = errno;
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
    throw Error(
        ErrorCode::System, std::string("epoll/eventfd creation failed: ") + std::strerror(saved),
        {.op = std::string("open_device ") + provider_, .hint = "check the process's descriptor limit (ulimit -n)"});
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = watch_tag(Watch::Wake, 0);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
}

SoftRcDevice::~SoftRcDevice() {
  stop();
  for (auto& [fd, p] : pending_) {
    ::close(fd);
    if (p.carried_fd >= 0) ::close(p.carried_fd);
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
  ::close(wake_fd_);
  ::close(epoll_fd_);
}

void SoftRcDevice::start(int listen_fd, std::string name, std::string why) {
  listen_fd_ = listen_fd;
  name_ = std::move(name);
  why_ = std::move(why);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = watch_tag(Watch::Listener, 0);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  engine_ = std::thread([this] { engine_main(); });
}

void SoftRcDevice::stop() {
  if (!engine_.joinable()) return;
  stopping_.store(true);
  std::uint64_t one = 1;
  [[maybe_unused]] auto ignored = ::write(wake_fd_, &one, sizeof(one));
  parking_.wake();
  engine_.join();
}

DeviceCaps SoftRcDevice::caps() const {
  DeviceCaps caps;
  caps.remote_peers = remote_peers_;
  caps.same_host_peers = true;
  caps.auto_progress = true;
  caps.ordered_write_placement = true;  // see core::place_last_word_last
  caps.writes_wake_waiters = true;      // every WRITE is placed by software: tcp's engine, shm's copies
  caps.direct_registered_writes = direct_registered_writes_;
  caps.max_msg_size = max_message_;
  caps.max_qp_wr = 16384;
  caps.max_sge = kSoftMaxSge;
  caps.max_inline_data = 0;
  caps.cuda_memory = cuda_memory_;
  caps.latency_us = figures_.latency_us;
  caps.bandwidth_gbps = figures_.bandwidth_gbps;
  caps.same_host_connection_memory = figures_.same_host_connection_memory;
  return caps;
}

std::unique_ptr<ProtectionDomain> SoftRcDevice::alloc_pd() {
  const DeviceCaps all = caps();
  return make_device_pd(std::make_shared<RegistryProtectionDomain>(
      hold(ChildKind::ProtectionDomain), registry(), provider(), all.cuda_memory,
      all.cuda_memory == CudaMemorySupport::PeerMapping, all.writes_wake_waiters ? this : nullptr));
}

std::unique_ptr<CompletionQueue> SoftRcDevice::create_cq(std::size_t depth) {
  return make_device_cq(depth, *this, *this, hold(ChildKind::CompletionQueue));
}

std::unique_ptr<QueuePair> SoftRcDevice::create_qp(ProtectionDomain& pd, CompletionQueue& send_cq,
                                                   CompletionQueue& recv_cq, const QpCaps& caps) {
  return make_qp(check_qp_parts(pd, send_cq, recv_cq, registry(), hold(ChildKind::QueuePair)), caps);
}

void SoftRcDevice::add_qp_locked(SoftRcQp* qp) {
  qps_[qp->qp_num()] = qp;
  qp_list_.push_back(qp);
}

void SoftRcDevice::remove_qp_locked(SoftRcQp* qp) {
  qps_.erase(qp->qp_num());
  std::erase(qp_list_, qp);
}

std::size_t SoftRcDevice::epoll_pass_locked() {
  epoll_event events[64];
  const int n = ::epoll_wait(epoll_fd_, events, 64, 0);
  std::size_t did = 0;
  for (int i = 0; i < n; ++i) {
    const auto kind = static_cast<Watch>(events[i].data.u64 >> 32);
    const auto id = static_cast<std::uint32_t>(events[i].data.u64);
    switch (kind) {
      case Watch::Listener:
        accept_all_locked();
        ++did;
        break;
      case Watch::Pending:
        hello_progress_locked(static_cast<int>(id));
        ++did;
        break;
      case Watch::Wake: {
        std::uint64_t value;
        [[maybe_unused]] auto ignored = ::read(wake_fd_, &value, sizeof(value));
        break;
      }
      case Watch::Qp:
        if (auto it = qps_.find(id); it != qps_.end()) {
          SoftRcQp* qp = it->second;
          qp->device_lock_held(lock_);
          if (qp->on_socket_locked(events[i].events)) ++did;
        }
        break;
      default:
        if (on_watch_locked(kind, id, events[i].events)) ++did;
        break;
    }
  }
  return did;
}

void SoftRcDevice::accept_all_locked() {
  for (int accepted = 0; accepted < kAcceptBatch; ++accepted) {
    sockaddr_storage from{};
    socklen_t length = sizeof(from);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      const int error = errno;
      if (error == EINTR || error == ECONNABORTED) continue;
      if (error == EAGAIN || error == EWOULDBLOCK) return;
      if (error == EMFILE || error == ENFILE || error == ENOBUFS || error == ENOMEM) {
        // The connection stays in the backlog; take it when there is room again.
        if (!accept_starved_) {
          RDMX_WARN(
              "%s %s: cannot accept connections: %s (%zu QPs, %zu connections pending); retrying every %lld ms "
              "(raise the open-files limit, ulimit -n, or use fewer QPs)",
              provider_, name_.c_str(), std::strerror(error), qps_.size(), pending_.size(),
              static_cast<long long>(kAcceptRetry.count()));
        }
        accept_starved_ = true;
        note_descriptor_shortage("accept()", error);
        epoll_event ev{};
        ev.data.u64 = watch_tag(Watch::Listener, 0);
        ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
        accept_paused_until_ = Clock::now() + kAcceptRetry;
        return;
      }
      RDMX_WARN("%s %s: accept failed: %s", provider_, name_.c_str(), std::strerror(error));
      return;
    }
    if (accept_starved_) {
      RDMX_INFO("%s %s: accepting connections again", provider_, name_.c_str());
      accept_starved_ = false;
    }
    std::string who = accepted_locked(fd, from);
    if (pending_.size() >= kMaxPendingConnections && !evict_silent_locked()) {
      auth::log_refusal(std::string(provider_) + " " + name_, who,
                        std::to_string(pending_.size()) +
                            " connections wait for their QP, none silent for a second (closed unanswered: a real "
                            "peer retries)");
      close_refused_locked(fd);
      continue;
    }
    PendingConnection& p = pending_[fd];
    p.fd = fd;
    p.peer = who;
    p.accepted_at = Clock::now();
    if (const char* problem = greet_locked(p)) {
      drop_pending_locked(fd, problem);
      continue;
    }
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = watch_tag(Watch::Pending, static_cast<std::uint32_t>(fd));
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    const std::string source = who.empty() ? "" : " from " + who;
    RDMX_TRACE("%s %s: accepted a connection%s", provider_, name_.c_str(), source.c_str());
  }
}

void SoftRcDevice::note_descriptor_shortage(const char* what, int error) {
  LockGuard guard(shortage_mutex_);
  shortage_at_ = Clock::now();
  shortage_ = std::string(what) + " failed: " + std::strerror(error);
}

std::string SoftRcDevice::descriptor_shortage_since(Clock::time_point since) const {
  LockGuard guard(shortage_mutex_);
  if (shortage_.empty() || shortage_at_ < since) return {};
  return "; this process ran out of descriptors meanwhile, so the connection may be what it could not take (" +
         shortage_ + "): raise the open-files limit (ulimit -n) or use fewer QPs";
}

void SoftRcDevice::drop_pending_locked(int fd, const char* why) {
  auto it = pending_.find(fd);
  if (it == pending_.end()) return;
  auth::log_refusal(std::string(provider_) + " " + name_, it->second.peer,
                    std::string(why) + " (closed before it reached a QP)");
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  if (it->second.carried_fd >= 0) ::close(it->second.carried_fd);
  pending_.erase(it);
  close_refused_locked(fd);
}

void SoftRcDevice::close_refused_locked(int fd) { ::close(fd); }

bool SoftRcDevice::evict_silent_locked() {
  auto oldest = pending_.end();
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (!it->second.complete && (oldest == pending_.end() || it->second.accepted_at < oldest->second.accepted_at)) {
      oldest = it;
    }
  }
  if (oldest == pending_.end() || Clock::now() - oldest->second.accepted_at < kEvictSilentAfter) return false;
  drop_pending_locked(oldest->first, "made room for a newer connection while this one had sent no HELLO");
  return true;
}

void SoftRcDevice::hello_progress_locked(int fd) {
  auto it = pending_.find(fd);
  if (it == pending_.end() || it->second.complete) return;
  PendingConnection& p = it->second;
  const char* problem = read_hello_locked(p);
  if (problem == nullptr) return;
  if (*problem != '\0') return drop_pending_locked(fd, problem);
  if (p.ids.target_nonce != nonce_) {
    return drop_pending_locked(fd, "HELLO names another device instance (stale QP address from an earlier run?)");
  }
  p.complete = true;
  // Parked until its QP takes it: stop watching, or level-triggered epoll would report the unread bytes again.
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  auto qp = qps_.find(p.ids.target_qpn);
  if (qp == qps_.end()) return drop_pending_locked(fd, "HELLO names a QP number that does not exist");
  qp->second->device_lock_held(lock_);
  switch (qp->second->offer_locked(p)) {
    case Offer::Taken: pending_.erase(it); return;
    case Offer::NotYet: return;  // claimed later by connect()
    case Offer::Refused: return drop_pending_locked(fd, "HELLO comes from a peer this QP is not connected to");
  }
}

std::optional<PendingConnection> SoftRcDevice::claim_pending_locked(std::uint32_t qpn, std::uint32_t remote_qpn,
                                                                    std::uint64_t remote_nonce) {
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    const PendingConnection& p = it->second;
    if (p.complete && p.ids.target_qpn == qpn && p.ids.source_qpn == remote_qpn && p.ids.source_nonce == remote_nonce) {
      PendingConnection claimed = p;
      pending_.erase(it);
      return claimed;
    }
  }
  return std::nullopt;
}

void SoftRcDevice::maybe_run_timers_locked() {
  const auto now = Clock::now();
  if (now < next_timer_scan_) return;
  bool busy = device_timers_locked(now);
  if (accept_paused_until_) {
    busy = true;
    if (now >= *accept_paused_until_) {
      accept_paused_until_.reset();
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = watch_tag(Watch::Listener, 0);
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
    }
  }
  for (SoftRcQp* qp : qp_list_) {
    qp->device_lock_held(lock_);
    if (qp->on_timer_locked(now)) busy = true;
  }
  const auto limit = timeout();
  const auto hello_limit = std::min<Clock::duration>(limit, kHelloBound);
  // A pending connection waits for a HELLO (a socket event) or for its QP's
  // connect(); only its deadlines, seconds away, are timers, and the idle
  // engine's wake-up checks them often enough. Counting them as busy woke
  // every rank's engine each millisecond while hundreds of ranks connected.
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto next = std::next(it);
    const auto age = now - it->second.accepted_at;
    if (!it->second.complete && age > hello_limit) {
      drop_pending_locked(it->first, "no HELLO within min(RDMX_TIMEOUT, 10 s) of connecting");
    } else if (age > limit) {
      drop_pending_locked(it->first, "no QP claimed the connection within RDMX_TIMEOUT");
    }
    it = next;
  }
  timers_busy_.store(busy, std::memory_order_relaxed);
  next_timer_scan_ = now + std::chrono::milliseconds(1);
}

void SoftRcDevice::engine_main() {
  auto last_work = Clock::now();
  const auto spin = spin_budget();
  int idle_wakeups = 0;
  while (!stopping_.load(std::memory_order_relaxed)) {
    if (parking_.park_while_application_drives()) continue;
    // One clock read a turn: it tells the pass whether the engine is idle,
    // and dates the work the pass does.
    const auto now = Clock::now();
    const bool idle = now - last_work > spin;
    std::size_t did = 0;
    if (lock_.try_lock()) {
      LockGuard guard(lock_, kAdoptLock);
      did = engine_pass_locked(idle);
    }
    if (did != 0) {
      last_work = now;
      idle_wakeups = 0;
      continue;
    }
    if (!idle) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
      continue;
    }
    if (!prepare_sleep()) {
      last_work = Clock::now();
      continue;
    }
    // Block until a socket or timer needs us; the next pass does the work.
    epoll_event event;
    const int n = ::epoll_wait(epoll_fd_, &event, 1, timers_busy_ ? 1 : 100);
    end_sleep();
    if (n > 0 && ++idle_wakeups > 64) {
      // Woken repeatedly with nothing to do (should not happen): never burn a core.
      RDMX_TRACE("%s %s: progress engine woke %d times with nothing to do", provider_, name_.c_str(), idle_wakeups);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    last_work = Clock::now() - spin;  // after a wake-up, one pass, then block again unless busy
  }
}

}  // namespace rdmx::core
