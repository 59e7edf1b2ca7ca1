// SPDX-License-Identifier: MIT
#include "providers/shm/shm_device.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "core/completion_queue.hpp"
#include "core/config.hpp"
#include "core/log.hpp"
#include "providers/shm/shm_factory.hpp"
#include "providers/shm/shm_qp.hpp"
#include "core/asymmetric_fence.hpp"

namespace rdmx::shm {
namespace {

// Sockets carry only connections, wake-ups and a peer's exit: polled every
// 256th pass, an epoll_wait costs the spinning application ~2 ns a pass.
constexpr std::uint32_t kEpollPassEvery = 256;
constexpr std::uint32_t kTimerPassEvery = 256;
constexpr std::size_t kMaxPendingConnections = 1024;
// Measured (rdmx_perf --heap, docs/SHM_PROVIDER.md): through the rings vs
// one cross-memory copy, 8 KiB: 1.61 vs 1.20 us, 12.7-13.8 vs 11.3 GB/s;
// 16 KiB: 2.84 vs 1.45 us, 13.2-14.4 vs 16.3 GB/s.
constexpr std::size_t kDefaultEagerLimit = 8 * 1024;

[[noreturn]] void throw_system(const std::string& what, const std::string& where) {
  throw Error(ErrorCode::System, what + ": " + std::strerror(errno),
              {.op = "open_device shm", .peer_addr = where,
               .hint = "set RDMX_SHM_DIR to a writable local directory, or use RDMX_PROVIDER=tcp"});
}

// The directory of the devices' sockets: RDMX_SHM_DIR, else one per user in /tmp.
std::string socket_directory() {
  if (auto dir = core::env("RDMX_SHM_DIR")) return *dir;
  return "/tmp/rdmx-shm-" + std::to_string(::getuid());
}

// Whether a process is gone: no such pid, or a zombie its parent has not reaped yet.
bool process_gone(int pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return false;
  char state = 0;
  // "pid (comm) state ...": the state follows the last ')'.
  char line[512];
  if (std::fgets(line, sizeof(line), f) != nullptr) {
    if (const char* close = std::strrchr(line, ')'); close != nullptr && close[1] == ' ') state = close[2];
  }
  std::fclose(f);
  return state == 'Z' || state == 'X';
}

// Sockets of processes that died without closing their device (SIGKILL).
void remove_stale_sockets(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  while (dirent* e = ::readdir(d)) {
    int pid = 0;
    char rest[64];
    if (std::sscanf(e->d_name, "%d-%63s", &pid, rest) != 2 || pid <= 0) continue;
    if (std::strstr(rest, ".sock") == nullptr) continue;
    if (process_gone(pid)) ::unlink((dir + "/" + e->d_name).c_str());
  }
  ::closedir(d);
}
}  // namespace

std::size_t eager_limit() {
  // Capped so that an eager record always fits the ring several times over.
  static const std::size_t limit = std::min<std::size_t>(core::env_size("RDMX_SHM_EAGER_LIMIT", kDefaultEagerLimit),
                                                         64 * 1024);
  return limit;
}

std::shared_ptr<Device> open_shm_device(const std::string& why, core::DeviceResources resources) {
  return std::make_shared<ShmDevice>(why, std::move(resources));
}

ShmDevice::ShmDevice(std::string why, core::DeviceResources resources) : resources_(std::move(resources)) {
  std::random_device entropy;
  nonce_ = (static_cast<std::uint64_t>(entropy()) << 32) ^ entropy() ^ static_cast<std::uint64_t>(::getpid());
  const std::string dir = socket_directory();
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) throw_system("cannot create the socket directory", dir);
  remove_stale_sockets(dir);
  char file[64];
  std::snprintf(file, sizeof(file), "/%d-%016llx.sock", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(nonce_));
  socket_path_ = dir + file;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path_.size() >= sizeof(addr.sun_path)) {
    throw Error(ErrorCode::InvalidArgument, "socket path too long: " + socket_path_,
                {.op = "open_device shm", .hint = "set RDMX_SHM_DIR to a shorter directory"});
  }
  std::memcpy(addr.sun_path, socket_path_.c_str(), socket_path_.size() + 1);
  listen_fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw_system("socket(AF_UNIX) failed", socket_path_);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(listen_fd_, 512) != 0) {
    int saved = errno;
    ::close(listen_fd_);
    errno = saved;
    throw_system("cannot listen on the device socket", socket_path_);
  }
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) throw_system("epoll/eventfd creation failed", socket_path_);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = watch_tag(Watch::Listener, 0);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.u64 = watch_tag(Watch::Wake, 0);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  // Let peers on this host attach to our memory even under Yama's "restricted
  // ptrace" (scope 1); the region table still decides every access.
#ifdef PR_SET_PTRACER
  ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
#endif
  asymmetric_fence_ = core::asymmetric_fence_available();
  registry().add_access_lock(&mutex_);
  name_ = "shm:" + socket_path_;
  why_ = why + "; eager limit " + std::to_string(eager_limit()) + " B, larger messages by cross-memory attach";
  engine_ = std::thread([this] { engine_main(); });
}

ShmDevice::~ShmDevice() {
  stopping_.store(true);
  std::uint64_t one = 1;
  [[maybe_unused]] auto ignored = ::write(wake_fd_, &one, sizeof(one));
  parking_.wake();
  if (engine_.joinable()) engine_.join();
  registry().remove_access_lock(&mutex_);
  for (auto& [fd, p] : pending_) {
    ::close(fd);
    if (p.hello.memfd >= 0) ::close(p.hello.memfd);
  }
  ::close(listen_fd_);
  ::unlink(socket_path_.c_str());
  ::close(wake_fd_);
  ::close(epoll_fd_);
}

DeviceCaps ShmDevice::caps() const {
  DeviceCaps caps;
  caps.remote_peers = false;
  caps.same_host_peers = true;
  caps.auto_progress = true;
  caps.ordered_write_placement = true;  // see core::place_last_word_last
  caps.max_msg_size = kMaxMessage;
  caps.max_qp_wr = 16384;
  caps.max_sge = kMaxSge;
  caps.max_inline_data = 0;
  return caps;
}

std::unique_ptr<ProtectionDomain> ShmDevice::alloc_pd() {
  return std::make_unique<core::RegistryProtectionDomain>(registry());
}

std::unique_ptr<CompletionQueue> ShmDevice::create_cq(std::size_t depth) {
  return core::make_device_cq(depth, *this, *this);
}

std::unique_ptr<QueuePair> ShmDevice::create_qp(ProtectionDomain& pd, CompletionQueue& send_cq,
                                                CompletionQueue& recv_cq, const QpCaps& caps) {
  auto parts = core::check_qp_parts(pd, send_cq, recv_cq, registry());
  return std::make_unique<ShmQp>(*this, parts.pd, parts.send_cq, parts.recv_cq, caps);
}

std::size_t ShmDevice::progress() {
  note_application_activity();
  // Idle calls skip the lock (a locked instruction, most of an idle call's
  // cost); every 256th call per thread takes it anyway, for sockets and timers.
  static thread_local std::uint32_t calls = 0;
  if ((++calls & (kEpollPassEvery - 1)) != 0 && unprobed_qps_.load(std::memory_order_relaxed) == 0 &&
      !any_probe_hot()) {
    return 0;
  }
  std::unique_lock lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return 0;
  return pass_locked(false);
}

bool ShmDevice::any_probe_hot() const {
  const std::uint32_t high = probe_high_.load(std::memory_order_acquire);
  for (std::uint32_t i = 0; i < high; ++i) {
    const Probe& p = probes_[i];
    if (p.busy.load(std::memory_order_relaxed) != 0) return true;
    const auto* stamp = p.stamp.load(std::memory_order_acquire);
    if (stamp != nullptr && stamp->load(std::memory_order_relaxed) == p.expect.load(std::memory_order_relaxed)) {
      return true;
    }
  }
  return false;
}

ShmDevice::Probe* ShmDevice::claim_probe_locked() {
  for (std::size_t i = 0; i < kProbes; ++i) {
    if (probe_used_[i]) continue;
    probe_used_[i] = true;
    if (i + 1 > probe_high_.load(std::memory_order_relaxed)) {
      probe_high_.store(static_cast<std::uint32_t>(i + 1), std::memory_order_release);
    }
    probes_[i].busy.store(1, std::memory_order_relaxed);
    return &probes_[i];
  }
  unprobed_qps_.fetch_add(1);
  return nullptr;
}

void ShmDevice::release_probe_locked(Probe* probe) {
  if (probe == nullptr) {
    unprobed_qps_.fetch_sub(1);
    return;
  }
  probe->stamp.store(nullptr, std::memory_order_release);
  probe->busy.store(0, std::memory_order_relaxed);
  probe_used_[static_cast<std::size_t>(probe - probes_.data())] = false;
}

void ShmDevice::add_qp_locked(ShmQp* qp) {
  qps_[qp->qp_num()] = qp;
  qp_list_.push_back(qp);
}

void ShmDevice::remove_qp_locked(ShmQp* qp) {
  qps_.erase(qp->qp_num());
  std::erase(qp_list_, qp);
}

std::size_t ShmDevice::pass_locked(bool full) {
  // The rings are polled on every pass (one load each when idle); sockets
  // (connections, wake-ups, a peer's exit) and timers less often.
  std::size_t did = 0;
  for (ShmQp* qp : qp_list_) did += qp->poll_locked();
  ++passes_;
  if (full || passes_ % kEpollPassEvery == 0) did += epoll_pass_locked();
  if (full || passes_ % kTimerPassEvery == 0) {
    auto now = core::Clock::now();
    if (now >= next_timer_scan_) run_timers_locked(now);
  }
  return did;
}

std::size_t ShmDevice::epoll_pass_locked() {
  epoll_event events[64];
  int n = ::epoll_wait(epoll_fd_, events, 64, 0);
  std::size_t did = 0;
  for (int i = 0; i < n; ++i) {
    auto kind = static_cast<Watch>(events[i].data.u64 >> 32);
    auto id = static_cast<std::uint32_t>(events[i].data.u64);
    switch (kind) {
      case Watch::Listener:
        accept_all_locked();
        ++did;
        break;
      case Watch::Pending:
        read_hello_locked(static_cast<int>(id));
        ++did;
        break;
      case Watch::Qp:
        if (auto it = qps_.find(id); it != qps_.end() && it->second->on_socket_locked(events[i].events)) ++did;
        break;
      case Watch::Wake: {
        std::uint64_t value;
        [[maybe_unused]] auto ignored = ::read(wake_fd_, &value, sizeof(value));
        break;
      }
    }
  }
  return did;
}

void ShmDevice::accept_all_locked() {
  for (;;) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        RDMX_WARN("shm %s: accept failed: %s", name_.c_str(), std::strerror(errno));
      }
      return;
    }
    if (pending_.size() >= kMaxPendingConnections) {
      RDMX_WARN("shm %s: refusing a connection: %zu connections already wait for their QP", name_.c_str(),
                pending_.size());
      ::close(fd);
      continue;
    }
    Pending& p = pending_[fd];
    p.hello.socket = fd;
    p.accepted_at = core::Clock::now();
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = watch_tag(Watch::Pending, static_cast<std::uint32_t>(fd));
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  }
}

void ShmDevice::drop_pending_locked(int fd, const char* why) {
  auto it = pending_.find(fd);
  if (it == pending_.end()) return;
  RDMX_WARN("shm %s: closing a connection before it reached its QP: %s", name_.c_str(), why);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  if (it->second.hello.memfd >= 0) ::close(it->second.hello.memfd);
  pending_.erase(it);
}

void ShmDevice::read_hello_locked(int fd) {
  auto it = pending_.find(fd);
  if (it == pending_.end() || it->second.complete) return;
  Pending& p = it->second;
  int memfd = -1;
  int error = receive_with_fd(fd, &p.hello.hello, sizeof(Hello), &memfd);
  if (error == EAGAIN || error == EINTR) return;
  if (error != 0) return drop_pending_locked(fd, error == EPROTO ? "malformed HELLO" : "closed before HELLO");
  p.hello.memfd = memfd;
  const Hello& h = p.hello.hello;
  if (h.magic != kHelloMagic || h.version != kHandshakeVersion) return drop_pending_locked(fd, "not an rdmx shm HELLO");
  if (memfd < 0) return drop_pending_locked(fd, "HELLO came without its shared segment");
  if (h.target_nonce != nonce_) {
    return drop_pending_locked(fd, "HELLO names another device instance (stale QP address from an earlier run?)");
  }
  p.complete = true;
  // Parked until its QP takes it: stop watching, or level-triggered epoll would report it again.
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  auto qp = qps_.find(h.target_qpn);
  if (qp == qps_.end()) return drop_pending_locked(fd, "HELLO names a QP number that does not exist");
  switch (qp->second->offer_locked(p.hello)) {
    case ShmQp::Offer::Taken:
      pending_.erase(it);
      return;
    case ShmQp::Offer::NotYet:
      return;
    case ShmQp::Offer::Refused:
      return drop_pending_locked(fd, "HELLO comes from a peer this QP is not connected to");
  }
}

bool ShmDevice::claim_pending_locked(std::uint32_t qpn, std::uint32_t remote_qpn, std::uint64_t remote_nonce,
                                     PendingHello* out) {
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    const Pending& p = it->second;
    if (p.complete && p.hello.hello.target_qpn == qpn && p.hello.hello.source_qpn == remote_qpn &&
        p.hello.hello.source_nonce == remote_nonce) {
      *out = p.hello;
      pending_.erase(it);
      return true;
    }
  }
  return false;
}

void ShmDevice::run_timers_locked(core::Clock::time_point now) {
  bool busy = false;
  for (ShmQp* qp : qp_list_) {
    if (qp->on_timer_locked(now)) busy = true;
  }
  const auto limit = core::timeout();
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto next = std::next(it);
    if (now - it->second.accepted_at > limit) {
      drop_pending_locked(it->first, "no QP claimed the connection within RDMX_TIMEOUT");
    } else {
      busy = true;
    }
    it = next;
  }
  timers_busy_.store(busy, std::memory_order_relaxed);
  next_timer_scan_ = now + std::chrono::milliseconds(1);
}

bool ShmDevice::prepare_sleep_locked() {
  // Batched acknowledgements go out before we stop producing them.
  for (ShmQp* qp : qp_list_) qp->publish_acks_locked(true);
  for (ShmQp* qp : qp_list_) qp->set_sleeping_locked(true);
  // Pairs with the producer's fence between publishing a record and reading
  // the mark: either it sees the mark and wakes us, or we see its record.
  core::heavy_fence(asymmetric_fence_);
  for (ShmQp* qp : qp_list_) {
    if (qp->has_input_locked()) {
      end_sleep_locked();
      return false;
    }
  }
  return true;
}

void ShmDevice::end_sleep_locked() {
  for (ShmQp* qp : qp_list_) qp->set_sleeping_locked(false);
}

void ShmDevice::engine_main() {
  auto last_work = core::Clock::now();
  const auto spin = core::spin_budget();
  int idle_wakeups = 0;
  while (!stopping_.load(std::memory_order_relaxed)) {
    if (parking_.park_while_application_drives()) continue;
    std::size_t did = 0;
    {
      std::unique_lock lock(mutex_, std::try_to_lock);
      if (lock.owns_lock()) did = pass_locked(core::Clock::now() - last_work > spin);
    }
    auto now = core::Clock::now();
    if (did != 0) {
      last_work = now;
      idle_wakeups = 0;
      continue;
    }
    if (now - last_work < spin) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
      continue;
    }
    {
      std::lock_guard lock(mutex_);
      if (!prepare_sleep_locked()) {
        last_work = core::Clock::now();
        continue;
      }
    }
    epoll_event event;
    int n = ::epoll_wait(epoll_fd_, &event, 1, timers_busy_ ? 1 : 100);
    {
      std::lock_guard lock(mutex_);
      end_sleep_locked();
    }
    if (n > 0 && ++idle_wakeups > 64) {
      RDMX_TRACE("shm %s: progress engine woke %d times with nothing to do", name_.c_str(), idle_wakeups);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    last_work = core::Clock::now() - spin;  // one full pass after a wake-up, then block again unless busy
  }
}

}  // namespace rdmx::shm
