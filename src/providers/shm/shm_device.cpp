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

#include "driver/completion_queue.hpp"
#include "providers/shm/address.hpp"
#include "providers/shm/copy.hpp"
#include "providers/shm/shm_factory.hpp"
#include "providers/shm/shm_qp.hpp"
#include "services/asymmetric_fence.hpp"
#include "services/config.hpp"
#include "services/log.hpp"
#include "services/mutex.hpp"
#include "services/process.hpp"
#include "services/settings.hpp"

namespace rdmx::shm {
namespace {

// Sockets carry only connections, wake-ups and a peer's exit: polled every
// 256th pass, their epoll_wait costs a spinning application next to nothing
// (docs/journal/PERFORMANCE-HISTORY.md, "Measurements behind the code").
constexpr std::uint32_t kEpollPassEvery = 256;
constexpr std::uint32_t kTimerPassEvery = 256;
// The default is where one cross-memory copy overtakes the rings
// (docs/journal/PERFORMANCE-HISTORY.md, "Measurements behind the code"); the cap keeps an eager record fitting the ring
// several times over.
constexpr core::SizeSetting kEagerLimit{"RDMX_SHM_EAGER_LIMIT", 8 * 1024,
                                        "shm: largest message copied through the rings (at most 64K)", 0, 64 * 1024};
RDMX_SETTING(kEagerLimit);

std::string default_socket_directory() { return "/tmp/rdmx-shm-" + std::to_string(::getuid()); }
constexpr core::TextSetting kShmDir{"RDMX_SHM_DIR", "/tmp/rdmx-shm-UID", "shm: the directory of the devices' sockets",
                                    default_socket_directory};
RDMX_SETTING(kShmDir);

[[noreturn]] void throw_system(const std::string& what, const std::string& where) {
  throw Error(ErrorCode::System, what + ": " + std::strerror(errno),
              {.op = "open_device shm",
               .peer_addr = where,
               .hint = "set RDMX_SHM_DIR to a writable local directory, or use RDMX_PROVIDER=tcp"});
}

std::string socket_directory() { return kShmDir.value_text(); }

// Sockets of processes that died without closing their device (SIGKILL).
std::size_t remove_stale_sockets(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  std::size_t removed = 0;
  while (dirent* e = ::readdir(d)) {
    int pid = 0;
    char rest[64];
    if (std::sscanf(e->d_name, "%d-%63s", &pid, rest) != 2 || pid <= 0) continue;
    if (std::strstr(rest, ".sock") == nullptr) continue;
    if (core::process_gone(pid) && ::unlink((dir + "/" + e->d_name).c_str()) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}
}  // namespace

std::size_t remove_stale_shm_sockets() { return remove_stale_sockets(socket_directory()); }

std::size_t eager_limit() {
  static const std::size_t limit = kEagerLimit.read();
  return limit;
}

// Whoever can write into the directory can put a socket where a peer looks
// for ours: it must be this user's alone.
void check_socket_directory(const std::string& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) throw_system("cannot inspect the socket directory", dir);
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) {
    throw Error(ErrorCode::Config,
                "the shm socket directory " + dir + " is not a directory owned by this user (uid " +
                    std::to_string(::geteuid()) + "; it belongs to uid " + std::to_string(st.st_uid) + ")",
                {.op = "open_device shm",
                 .hint = "another user may have created it to intercept connections; remove it or set RDMX_SHM_DIR "
                         "to a directory of your own"});
  }
  if ((st.st_mode & 077) != 0 && ::chmod(dir.c_str(), 0700) != 0) {
    throw_system("cannot make the socket directory private (chmod 700)", dir);
  }
}

std::shared_ptr<Device> open_shm_device(const std::string& why, core::DeviceResources resources) {
  return std::make_shared<ShmDevice>(why, std::move(resources));
}

ShmDevice::ShmDevice(std::string why, core::DeviceResources resources)
    : SoftRcDevice(core::provider_shm, std::move(resources), kMaxMessage, false, false,
                   CudaMemorySupport::PeerMapping) {
  // A refused RDMX_SHM_* value fails opening the device, not the first copy that reads it.
  eager_limit();
  heap_direct_min();
  nt_threshold();
  split_threshold();
  copy_threads();
  const std::string dir = socket_directory();
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) throw_system("cannot create the socket directory", dir);
  check_socket_directory(dir);
  remove_stale_sockets(dir);
  char file[64];
  std::snprintf(file, sizeof(file), "/%d-%016llx.sock", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(nonce()));
  socket_path_ = dir + file;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path_.size() >= sizeof(addr.sun_path)) {
    throw Error(ErrorCode::InvalidArgument, "socket path too long: " + socket_path_,
                {.op = "open_device shm", .hint = "set RDMX_SHM_DIR to a shorter directory"});
  }
  std::memcpy(addr.sun_path, socket_path_.c_str(), socket_path_.size() + 1);
  const int listen_fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd < 0) throw_system("socket(AF_UNIX) failed", socket_path_);
  if (::bind(listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(listen_fd, 512) != 0) {
    int saved = errno;
    ::close(listen_fd);
    errno = saved;
    throw_system("cannot listen on the device socket", socket_path_);
  }
  // Let peers on this host attach to our memory even under Yama's "restricted
  // ptrace" (scope 1); the region table still decides every access.
#ifdef PR_SET_PTRACER
  ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
#endif
  asymmetric_fence_ = core::asymmetric_fence_available();
  registry().add_access_lock(&lock());
  start(listen_fd, "shm:" + socket_path_,
        why + "; eager limit " + std::to_string(eager_limit()) + " B, larger messages by cross-memory attach");
}

ShmDevice::~ShmDevice() {
  stop();
  registry().remove_access_lock(&lock());
  ::unlink(socket_path_.c_str());
  // A peer killed during the job could not remove its own socket: the
  // survivors do, as they close, so a job leaves nothing behind.
  remove_stale_sockets(socket_directory());
}

std::unique_ptr<QueuePair> ShmDevice::make_qp(const core::QpParts& parts, const QpCaps& caps) {
  return std::make_unique<ShmQp>(*this, parts, caps);
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
  if (!lock_.try_lock()) return 0;
  core::LockGuard guard(lock_, core::kAdoptLock);
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

QpAddress ShmDevice::qp_address(std::uint32_t qpn) const {
  ShmAddress self;
  self.boot_id = HostIdentity::self().boot_id;
  self.pid_namespace = HostIdentity::self().pid_namespace;
  self.pid = static_cast<std::uint32_t>(::getpid());
  self.qpn = qpn;
  self.nonce = nonce();
  self.socket_path = socket_path_;
  return self.encode();
}

std::size_t ShmDevice::pass_locked(bool full) {
  // The rings are polled on every pass (one load each when idle); sockets
  // (connections, wake-ups, a peer's exit) and timers less often.
  std::size_t did = 0;
  for (core::SoftRcQp* base : qp_list_) {
    auto* qp = static_cast<ShmQp*>(base);
    qp->state_held_by_device(lock_);
    did += qp->poll_locked();
  }
  ++passes_;
  if (full || passes_ % kEpollPassEvery == 0) did += epoll_pass_locked();
  if (full || passes_ % kTimerPassEvery == 0) maybe_run_timers_locked();
  return did;
}

const char* ShmDevice::greet_locked(core::PendingConnection& p) {
  // The directory is private, but a process of another user could still
  // hold a descriptor to it: only this user's processes are peers.
  ucred peer{};
  socklen_t length = sizeof(peer);
  if (::getsockopt(p.fd, SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0) return "cannot read the peer's credentials";
  if (peer.uid != ::geteuid()) return "the connecting process runs as another user";
  p.peer = "pid " + std::to_string(peer.pid);
  return nullptr;
}

const char* ShmDevice::read_hello_locked(core::PendingConnection& p) {
  static_assert(sizeof(Hello) <= sizeof(p.hello));
  Hello h;
  int memfd = -1;
  const int error = receive_with_fd(p.fd, &h, sizeof(Hello), &memfd);
  if (error == EAGAIN || error == EINTR) return nullptr;
  if (error == EMFILE) {
    note_descriptor_shortage("receiving a HELLO's shared segment", error);
    return "its shared segment could not be received: this process is out of descriptors (ulimit -n)";
  }
  if (error != 0) return error == EPROTO ? "malformed HELLO" : "closed before HELLO";
  std::memcpy(p.hello.data(), &h, sizeof(h));
  p.got = sizeof(h);
  p.carried_fd = memfd;
  if (h.magic != kHelloMagic || h.version != kHandshakeVersion) return "not an rdmx shm HELLO";
  if (memfd < 0) return "HELLO came without its shared segment";
  p.ids = h.ids;
  return "";
}

bool ShmDevice::prepare_sleep_locked() {
  // Batched acknowledgements go out before we stop producing them.
  for (core::SoftRcQp* base : qp_list_) {
    auto* qp = static_cast<ShmQp*>(base);
    qp->state_held_by_device(lock_);
    qp->publish_acks_locked(true);
    qp->set_sleeping_locked(true);
  }
  // Pairs with the producer's fence between publishing a record and reading
  // the mark: either it sees the mark and wakes us, or we see its record.
  core::heavy_fence(asymmetric_fence_);
  for (core::SoftRcQp* base : qp_list_) {
    auto* qp = static_cast<ShmQp*>(base);
    qp->state_held_by_device(lock_);
    if (qp->has_input_locked()) {
      end_sleep_locked();
      return false;
    }
  }
  return true;
}

void ShmDevice::end_sleep_locked() {
  for (core::SoftRcQp* base : qp_list_) {
    auto* qp = static_cast<ShmQp*>(base);
    qp->state_held_by_device(lock_);
    qp->set_sleeping_locked(false);
  }
}

bool ShmDevice::prepare_sleep() {
  core::LockGuard guard(lock_);
  return prepare_sleep_locked();
}

void ShmDevice::end_sleep() {
  core::LockGuard guard(lock_);
  end_sleep_locked();
}

}  // namespace rdmx::shm
