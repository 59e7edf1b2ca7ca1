// SPDX-License-Identifier: MIT
#include "services/unmap_watch.hpp"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <system_error>
#include <thread>

#include "services/config.hpp"
#include "services/log.hpp"
#include "services/mutex.hpp"

namespace rdmx::core {

// One per process (a forked child makes its own: its pages are not watched
// by the parent's userfaultfd, and the parent's reader thread is not there).
// Never destroyed: the kernel may hold a munmap until the reader thread reads
// its event, so the thread must outlive every other static destructor.
class UnmapWatcher {
 public:
  UnmapWatcher();

  int pid() const { return pid_; }
  UnmapWatchSupport support() {
    LockGuard lock(mu_);
    return {fd_ >= 0, how_};
  }

  WatchResult watch(const void* addr, std::size_t length) {
    const auto a = reinterpret_cast<std::uintptr_t>(addr);
    const std::uintptr_t start = a & ~(page_ - 1);
    const std::uintptr_t end = length == 0 ? start : (a + length + page_ - 1) & ~(page_ - 1);
    LockGuard lock(mu_);
    if (fd_ < 0) return {nullptr, how_};
    if (end > start) {
      uffdio_register reg{};
      reg.range.start = start;
      reg.range.len = end - start;
      reg.mode = UFFDIO_REGISTER_MODE_WP;
      if (::ioctl(fd_, UFFDIO_REGISTER, &reg) != 0) return {nullptr, register_failure(errno)};
    }
    // Allocating under the lock is safe (malloc never unmaps); freeing is
    // not (a trim could madvise watched pages and wait for this lock).
    std::unique_ptr<UnmapWatch> w(new UnmapWatch(this, start, end));
    w->next_ = head_;
    if (head_ != nullptr) head_->prev_ = w.get();
    head_ = w.get();
    return {std::move(w), {}};
  }

  void forget(UnmapWatch* w) {
    LockGuard lock(mu_);
    if (fd_ < 0) return;  // gave up: the list was let go with the descriptor
    (w->prev_ != nullptr ? w->prev_->next_ : head_) = w->next_;
    if (w->next_ != nullptr) w->next_->prev_ = w->prev_;
    if (w->end_ == w->start_) return;
    for (const UnmapWatch* o = head_; o != nullptr; o = o->next_) {
      if (o->start_ < w->end_ && w->start_ < o->end_) return;  // still watched for another
    }
    // Gives the pages their VMA merging back. Fails harmlessly (ignored)
    // where part of the range is no longer mapped.
    uffdio_range range{w->start_, w->end_ - w->start_};
    (void)::ioctl(fd_, UFFDIO_UNREGISTER, &range);
  }

  void set_clear(UnmapWatch* w, std::atomic<std::uint32_t>* word) {
    LockGuard lock(mu_);
    w->clear_ = word;
    if (w->unmapped_.load(std::memory_order_acquire)) word->store(0, std::memory_order_release);
  }

  // The kernel lets munmap return only once its event was read, and the
  // reader reads and marks under mu_: taking mu_ after such a call returned
  // therefore waits for its marks. No system call needed.
  void sync() { LockGuard lock(mu_); }

  void drain() {
    LockGuard lock(mu_);
    if (fd_ < 0) return;
    // Odd while events are read and marked: a munmap that returned had its
    // event read inside such a window, so a reader of the marks that finds
    // the count even after the munmap returned sees its mark.
    draining_.fetch_add(1);
    drain_locked();
    draining_.fetch_add(1);
  }

  // Whether no event is being read and marked at this moment.
  bool settled() const { return (draining_.load(std::memory_order_acquire) & 1) == 0; }

 private:
  void open_fd_locked() RDMX_REQUIRES(mu_) {
    if (!registration_cache_enabled()) {
      how_ = "off: RDMX_REGISTRATION_CACHE=0";
      return;
    }
    int fd = static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
    const char* mode = "";
    if (fd < 0 && errno == EPERM) {
      // vm.unprivileged_userfaultfd=0 (Debian's default) still allows a
      // descriptor that handles user-mode faults only; events are the same.
      fd = static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
      mode = ", user-mode only";
    }
    if (fd < 0) {
      const int err = errno;
      how_ = std::string("off: userfaultfd(2) failed: ") + std::strerror(err) +
             (err == ENOSYS ? " (kernel built without CONFIG_USERFAULTFD)"
                            : " (a seccomp profile, e.g. Docker's default, may refuse it; "
                              "allow the userfaultfd syscall to keep registrations between operations)");
      return;
    }
    uffdio_api api{};
    api.api = UFFD_API;
    api.features = UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP;
    if (::ioctl(fd, UFFDIO_API, &api) != 0) {
      how_ = std::string("off: this kernel's userfaultfd lacks unmap events (") + std::strerror(errno) +
             "); needs Linux 4.11 or later";
      ::close(fd);
      return;
    }
    fd_ = fd;
    how_ = "userfaultfd events (write-protect mode, nothing write-protected" + std::string(mode) + ")";
  }

  std::string register_failure(int err) const {
    switch (err) {
      case EBUSY: return "its pages are already registered with another userfaultfd (the application's own?)";
      case EINVAL:
        return "not private anonymous or shared memory, or not all mapped (a file mapping or device memory?)";
      case ENOMEM: return "not all mapped";
      default: return std::string("UFFDIO_REGISTER failed: ") + std::strerror(err);
    }
  }

  void read_events_forever() {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    for (;;) {
      pollfd pfd{fd_, POLLIN, 0};
      // No timeout: this thread only waits for the kernel's events, and a
      // munmap of watched pages waits for it.
      const int n = ::poll(&pfd, 1, -1);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 || (pfd.revents & (POLLERR | POLLNVAL)) != 0) {
        RDMX_WARN(
            "registration cache: stopped watching unmaps: poll on the userfaultfd failed (%s); "
            "registrations that pin pages now last one operation",
            n < 0 ? std::strerror(errno) : "POLLERR");
        give_up();
        return;
      }
      drain();
    }
  }

  // Closing the descriptor drops every registration (the kernel stops
  // holding munmaps for us); every watch reads as unmapped from then on.
  void give_up() {
    LockGuard lock(mu_);
    mark(0, UINTPTR_MAX);
    head_ = nullptr;
    ::close(fd_);
    fd_ = -1;
    how_ = "off: the userfaultfd reader failed";
  }

  void drain_locked() RDMX_REQUIRES(mu_) {
    uffd_msg msgs[16];
    for (;;) {
      const ssize_t n = ::read(fd_, msgs, sizeof msgs);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // EAGAIN: nothing pending
      const std::size_t count = static_cast<std::size_t>(n) / sizeof(uffd_msg);
      for (std::size_t i = 0; i < count; ++i) handle(msgs[i]);
      if (count < sizeof msgs / sizeof msgs[0]) return;
    }
  }

  void handle(const uffd_msg& msg) RDMX_REQUIRES(mu_) {
    switch (msg.event) {
      case UFFD_EVENT_UNMAP:
      case UFFD_EVENT_REMOVE: mark(msg.arg.remove.start, msg.arg.remove.end); break;
      case UFFD_EVENT_REMAP: mark(msg.arg.remap.from, msg.arg.remap.from + msg.arg.remap.len); break;
      case UFFD_EVENT_PAGEFAULT: {
        // Nothing is write-protected, so no fault should come; if a kernel
        // sends one anyway, unprotect the page (which wakes the thread) and
        // distrust the watch rather than leave the thread stuck.
        const std::uintptr_t page = msg.arg.pagefault.address & ~(page_ - 1);
        mark(page, page + page_);
        uffdio_writeprotect wp{};
        wp.range = {page, page_};
        wp.mode = 0;
        if (::ioctl(fd_, UFFDIO_WRITEPROTECT, &wp) != 0) {
          uffdio_range range{page, page_};
          (void)::ioctl(fd_, UFFDIO_WAKE, &range);
        }
        break;
      }
      default: break;
    }
  }

  void mark(std::uintptr_t start, std::uintptr_t end) RDMX_REQUIRES(mu_) {
    for (UnmapWatch* w = head_; w != nullptr; w = w->next_) {
      if (w->start_ >= end || start >= w->end_) continue;
      w->unmapped_.store(true, std::memory_order_release);
      if (w->clear_ != nullptr) w->clear_->store(0, std::memory_order_release);
    }
  }

  const int pid_;
  std::atomic<std::uint64_t> draining_{0};
  std::uintptr_t page_ = 4096;
  int fd_ = -1;
  std::string how_ RDMX_GUARDED_BY(mu_);
  Mutex mu_;
  UnmapWatch* head_ RDMX_GUARDED_BY(mu_) = nullptr;
};

UnmapWatcher::UnmapWatcher() : pid_(static_cast<int>(::getpid())) {
  const long page = ::sysconf(_SC_PAGESIZE);
  page_ = page > 0 ? static_cast<std::uintptr_t>(page) : 4096;
  {
    LockGuard lock(mu_);
    open_fd_locked();
  }
  if (fd_ < 0) return;
  try {
    std::thread([this] { read_events_forever(); }).detach();
  } catch (const std::system_error& e) {
    ::close(fd_);
    fd_ = -1;
    how_ = std::string("off: could not start the thread that reads unmap events: ") + e.what();
    return;
  }
  RDMX_INFO("registration cache: %s", how_.c_str());
}

namespace {
Mutex g_create_mu;
std::atomic<UnmapWatcher*> g_watcher{nullptr};
// getpid() is a system call on every use; this is kept current instead
// (fork() runs the child handler below).
std::atomic<int> g_pid{static_cast<int>(::getpid())};

const bool g_atfork_registered = [] {
  // A child must not wait on a lock some parent thread held at fork().
  pthread_atfork(nullptr, nullptr, [] {
    new (&g_create_mu) Mutex;
    g_pid.store(static_cast<int>(::getpid()), std::memory_order_relaxed);
  });
  return true;
}();

int current_pid() { return g_pid.load(std::memory_order_relaxed); }

UnmapWatcher& watcher() {
  UnmapWatcher* w = g_watcher.load(std::memory_order_acquire);
  if (w != nullptr && w->pid() == current_pid()) return *w;
  LockGuard lock(g_create_mu);
  w = g_watcher.load(std::memory_order_relaxed);
  if (w == nullptr || w->pid() != current_pid()) {
    w = new UnmapWatcher();  // the parent's copy stays behind in a child, unused
    g_watcher.store(w, std::memory_order_release);
  }
  return *w;
}
}  // namespace

UnmapWatch::~UnmapWatch() {
  // In a forked child the watcher and its lock are the parent's copies.
  if (owner_->pid() == current_pid()) owner_->forget(this);
}

bool UnmapWatch::unmapped() const {
  if (owner_->pid() != current_pid()) return true;
  return unmapped_.load(std::memory_order_acquire);
}

bool UnmapWatch::unmapped_now() const {
  if (owner_->pid() != current_pid()) return true;
  if (!owner_->settled()) owner_->sync();
  return unmapped_.load(std::memory_order_acquire);
}

void UnmapWatch::clear_on_unmap(std::atomic<std::uint32_t>* word) {
  if (owner_->pid() != current_pid()) {
    word->store(0, std::memory_order_release);
    return;
  }
  owner_->set_clear(this, word);
}

void read_unmap_events() { watcher().sync(); }

WatchResult watch_unmapping(const void* addr, std::size_t length) { return watcher().watch(addr, length); }

UnmapWatchSupport unmap_watch_support() { return watcher().support(); }

}  // namespace rdmx::core
