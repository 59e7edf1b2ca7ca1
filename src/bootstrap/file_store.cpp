// SPDX-License-Identifier: MIT
// A Store in a shared directory: one file per key.
//
// Writers create a temporary file and rename() it over the key's file, so a
// reader sees either the old value or the whole new one. add/compare_set/remove
// are read-modify-write and run under flock() on a lock file in the directory,
// which works across processes and, on Linux, across NFS clients. Waiters
// sleep on inotify (and re-check every 100 ms, since inotify does not see
// writes made by other NFS clients).
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bootstrap/store_common.hpp"
#include "services/config.hpp"
#include "services/log.hpp"
#include "services/mutex.hpp"
#include "services/wait.hpp"

namespace rdmx {
namespace bootstrap {
namespace {

// Blocked waiters wake at least this often to re-check by reading the directory.
constexpr auto kRecheckInterval = std::chrono::milliseconds(100);
// File names longer than this are shortened with a hash (NAME_MAX is 255).
constexpr std::size_t kMaxPlainName = 200;

std::string errno_text(int err) { return std::strerror(err); }

[[noreturn]] void throw_system(const std::string& what, int err, const char* op, const std::string& where,
                               const std::string& hint = {}) {
  throw Error(ErrorCode::System, what + ": " + errno_text(err) + " (errno " + std::to_string(err) + ")",
              ErrorContext{.op = op, .peer_addr = where, .hint = hint});
}

// Keys may hold any bytes ('/' included); file names hold only [A-Za-z0-9_-]
// and %XX escapes, so no key can name ".", "..", a temporary file (".tmp.*")
// or the lock file (".lock"), all of which start with '.'.
std::string file_name_for_key(const std::string& key) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string name;
  name.reserve(key.size());
  for (unsigned char c : key) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-') {
      name += static_cast<char>(c);
    } else {
      name += '%';
      name += kHex[c >> 4];
      name += kHex[c & 15];
    }
  }
  if (name.size() <= kMaxPlainName) return name;
  // Long keys: a readable head plus a 64-bit FNV-1a hash of the whole key. '~'
  // never appears in a plain name, so the two forms cannot collide.
  std::uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : key) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  char tail[24];
  std::snprintf(tail, sizeof(tail), "~%016llx", static_cast<unsigned long long>(hash));
  return name.substr(0, 150) + tail;
}

// The key a plain file name stands for; none for a hashed (long) key's name
// or a name no key makes.
std::optional<std::string> key_for_file_name(const std::string& name) {
  if (name.empty() || name.find('~') != std::string::npos) return std::nullopt;
  std::string key;
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (name[i] != '%') {
      key += name[i];
      continue;
    }
    if (i + 2 >= name.size() || !std::isxdigit(static_cast<unsigned char>(name[i + 1])) ||
        !std::isxdigit(static_cast<unsigned char>(name[i + 2]))) {
      return std::nullopt;
    }
    key += static_cast<char>(std::stoi(name.substr(i + 1, 2), nullptr, 16));
    i += 2;
  }
  return key;
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// Sleeps until something is renamed into or written in a directory.
class DirectoryWatch {
 public:
  explicit DirectoryWatch(const std::string& directory) {
    fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd_ < 0) {
      RDMX_INFO("file store %s: inotify unavailable (%s); waiters re-check every %lld ms", directory.c_str(),
                std::strerror(errno), static_cast<long long>(kRecheckInterval.count()));
      return;
    }
    if (inotify_add_watch(fd_, directory.c_str(), IN_MOVED_TO | IN_CLOSE_WRITE | IN_DELETE_SELF) < 0) {
      RDMX_INFO("file store %s: cannot watch the directory (%s); waiters re-check every %lld ms", directory.c_str(),
                std::strerror(errno), static_cast<long long>(kRecheckInterval.count()));
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~DirectoryWatch() {
    if (fd_ >= 0) ::close(fd_);
  }
  DirectoryWatch(const DirectoryWatch&) = delete;
  DirectoryWatch& operator=(const DirectoryWatch&) = delete;

  // Blocks until the directory changes or `limit` passes, then drains the events.
  void wait_for_change(core::Clock::duration limit) {
    auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::min<core::Clock::duration>(limit, kRecheckInterval));
    int timeout_ms = static_cast<int>(std::max<std::int64_t>(ms.count(), 1));
    if (fd_ < 0) {
      ::poll(nullptr, 0, timeout_ms);
      return;
    }
    pollfd pfd{.fd = fd_, .events = POLLIN, .revents = 0};
    if (::poll(&pfd, 1, timeout_ms) > 0) {
      alignas(inotify_event) char buffer[4096];
      while (::read(fd_, buffer, sizeof(buffer)) > 0) {
      }
    }
  }

 private:
  int fd_ = -1;
};

class FileStore final : public Store {
 public:
  explicit FileStore(std::string directory) : directory_(std::move(directory)) {
    while (directory_.size() > 1 && directory_.back() == '/') directory_.pop_back();
    address_ = "file:" + directory_;
    make_directories();
    // Probe the lock file now so a read-only or foreign directory fails at
    // open time with a clear message, not at the first add().
    Fd probe(open_lock_file());
  }

  using Store::get;
  using Store::set;
  using Store::wait;

  void set(const std::string& key, const Bytes& value) override {
    validate_key(key, "store.set", address_);
    validate_value(value.size(), "store.set", key, address_);
    write_atomically(key, value, "store.set");
  }

  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override {
    validate_key(key, "store.get", address_);
    Bytes value;
    auto ready = [&] {
      auto current = read_value(key, "store.get");
      if (!current) return false;
      value = std::move(*current);
      return true;
    };
    if (!ready()) block_until(ready, timeout, "store.get", {key});
    return value;
  }

  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    for (const auto& key : keys) validate_key(key, "store.wait", address_);
    std::size_t present = 0;  // keys before this index are known to exist; keys never disappear mid-wait in practice
    auto ready = [&] {
      while (present < keys.size() && exists(keys[present])) ++present;
      return present == keys.size();
    };
    if (!ready()) block_until(ready, timeout, "store.wait", keys);
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    validate_key(key, "store.add", address_);
    LockedSection lock(*this);
    std::int64_t current = 0;
    if (auto stored = read_value(key, "store.add")) {
      auto parsed = parse_int64(to_string(*stored));
      if (!parsed) {
        throw Error(ErrorCode::InvalidArgument,
                    "store.add: the value at key " + printable_key(key) + " is not a decimal integer",
                    ErrorContext{.op = "store.add",
                                 .peer_addr = address_,
                                 .sizes = "value_len=" + std::to_string(stored->size()),
                                 .hint = "add() only works on keys written by add() or set to a decimal string"});
      }
      current = *parsed;
    }
    std::int64_t updated =
        static_cast<std::int64_t>(static_cast<std::uint64_t>(current) + static_cast<std::uint64_t>(delta));
    write_atomically(key, to_bytes(std::to_string(updated)), "store.add");
    return updated;
  }

  bool remove(const std::string& key) override {
    validate_key(key, "store.remove", address_);
    LockedSection lock(*this);
    if (::unlink(path_for(key).c_str()) == 0) return true;
    if (errno == ENOENT) return false;
    throw_system("cannot remove " + path_for(key), errno, "store.remove", address_);
  }

  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    validate_key(key, "store.compare_set", address_);
    validate_value(desired.size(), "store.compare_set", key, address_);
    LockedSection lock(*this);
    auto current = read_value(key, "store.compare_set");
    bool matches = current ? *current == expected : expected.empty();
    if (!matches) return current.value_or(Bytes{});
    write_atomically(key, desired, "store.compare_set");
    return desired;
  }

  bool check(const std::string& key) override {
    validate_key(key, "store.check", address_);
    return exists(key);
  }

  // Every key is a file whose name does not start with '.' (file_name_for_key).
  StoreStats stats() override {
    std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(directory_.c_str()), ::closedir);
    if (!dir) throw_system("cannot list " + directory_, errno, "store.stats", address_);
    StoreStats out;
    while (const dirent* entry = ::readdir(dir.get())) {
      if (entry->d_name[0] == '.') continue;
      struct stat info {};
      if (::fstatat(::dirfd(dir.get()), entry->d_name, &info, AT_SYMLINK_NOFOLLOW) != 0) continue;  // removed meanwhile
      if (!S_ISREG(info.st_mode)) continue;
      ++out.keys;
      out.bytes += info.st_size;
    }
    return out;
  }

  // Long keys are stored under a hash of their name (file_name_for_key) and
  // cannot be listed; the keys rdmx publishes for tools are short.
  std::vector<std::string> keys(const std::string& prefix) override {
    std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(directory_.c_str()), ::closedir);
    if (!dir) throw_system("cannot list " + directory_, errno, "store.keys", address_);
    std::vector<std::string> out;
    while (const dirent* entry = ::readdir(dir.get())) {
      if (entry->d_name[0] == '.') continue;
      std::optional<std::string> key = key_for_file_name(entry->d_name);
      if (key && key->starts_with(prefix)) out.push_back(std::move(*key));
    }
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  // flock() excludes other processes (and other FileStore objects); the
  // mutex excludes threads sharing this object, which flock alone would not.
  // The lock file is opened per section so that a store used on both sides
  // of a fork() still excludes (a shared open file description would not).
  class LockedSection {
   public:
    explicit LockedSection(FileStore& store) : thread_lock_(store.mutex_), fd_(store.open_lock_file()) {
      while (::flock(fd_.get(), LOCK_EX) != 0) {
        if (errno != EINTR) throw_system("cannot lock " + store.lock_path(), errno, "store.lock", store.address_);
      }
    }
    ~LockedSection() { ::flock(fd_.get(), LOCK_UN); }
    LockedSection(const LockedSection&) = delete;
    LockedSection& operator=(const LockedSection&) = delete;

   private:
    core::LockGuard<core::Mutex> thread_lock_;
    Fd fd_;
  };

  std::string path_for(const std::string& key) const { return directory_ + "/" + file_name_for_key(key); }
  std::string lock_path() const { return directory_ + "/.lock"; }

  void make_directories() {
    if (directory_.empty()) {
      throw Error(ErrorCode::InvalidArgument, "file store directory must not be empty",
                  ErrorContext{
                      .op = "open_file_store",
                      .hint = "pass a directory every rank can reach, e.g. RDMX_STORE=file:/shared/job-$SLURM_JOB_ID"});
    }
    // mkdir -p: create each missing component; EEXIST is fine (another rank won the race).
    // The store's own directory is its owner's alone (it holds QP addresses
    // and memory keys); the components above it may be shared.
    for (std::size_t slash = directory_.find('/', 1);; slash = directory_.find('/', slash + 1)) {
      std::string prefix = slash == std::string::npos ? directory_ : directory_.substr(0, slash);
      if (::mkdir(prefix.c_str(), slash == std::string::npos ? 0700 : 0777) != 0 && errno != EEXIST) {
        throw_system("cannot create store directory " + prefix, errno, "open_file_store", address_,
                     "choose a directory on a file system every rank can write");
      }
      if (slash == std::string::npos) break;
    }
    struct stat info {};
    if (::stat(directory_.c_str(), &info) != 0)
      throw_system("cannot stat " + directory_, errno, "open_file_store", address_);
    if (!S_ISDIR(info.st_mode)) {
      throw Error(ErrorCode::InvalidArgument, directory_ + " exists and is not a directory",
                  ErrorContext{.op = "open_file_store", .peer_addr = address_});
    }
  }

  int open_lock_file() const {
    int fd = ::open(lock_path().c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
      throw_system("cannot open lock file " + lock_path(), errno, "open_file_store", address_,
                   "the store directory must be writable by every rank");
    }
    return fd;
  }

  bool exists(const std::string& key) const {
    struct stat info {};
    if (::stat(path_for(key).c_str(), &info) == 0) return true;
    if (errno == ENOENT) return false;
    throw_system("cannot stat " + path_for(key), errno, "store.check", address_);
  }

  std::optional<Bytes> read_value(const std::string& key, const char* op) const {
    std::string path = path_for(key);
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) {
      if (errno == ENOENT) return std::nullopt;
      throw_system("cannot open " + path, errno, op, address_);
    }
    Bytes value;
    std::uint8_t chunk[65536];
    for (;;) {
      ssize_t n = ::read(fd.get(), chunk, sizeof(chunk));
      if (n > 0) {
        value.insert(value.end(), chunk, chunk + n);
        continue;
      }
      if (n == 0) break;
      if (errno == EINTR) continue;
      throw_system("cannot read " + path, errno, op, address_);
    }
    return value;
  }

  void write_atomically(const std::string& key, const Bytes& value, const char* op) {
    static std::atomic<std::uint64_t> counter{0};
    char host[128] = {};
    ::gethostname(host, sizeof(host) - 1);
    // Unique across hosts sharing the directory, processes and threads.
    std::string temp = directory_ + "/.tmp." + host + "." + std::to_string(::getpid()) + "." +
                       std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
    Fd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (fd.get() < 0)
      throw_system("cannot create " + temp, errno, op, address_, "the store directory must be writable by every rank");
    std::size_t written = 0;
    while (written < value.size()) {
      ssize_t n = ::write(fd.get(), value.data() + written, value.size() - written);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        int err = n < 0 ? errno : EIO;
        ::unlink(temp.c_str());
        throw_system("cannot write " + temp, err, op, address_);
      }
      written += static_cast<std::size_t>(n);
    }
    // close() reports deferred write errors on network file systems.
    if (::close(fd.release()) != 0) {
      int err = errno;
      ::unlink(temp.c_str());
      throw_system("cannot write " + temp, err, op, address_);
    }
    if (::rename(temp.c_str(), path_for(key).c_str()) != 0) {
      int err = errno;
      ::unlink(temp.c_str());
      throw_system("cannot rename " + temp + " to " + path_for(key), err, op, address_);
    }
  }

  // Spins briefly then sleeps on inotify, through the one wait primitive so
  // deadlines and abort_waits() behave as everywhere else.
  void block_until(const std::function<bool()>& ready, std::chrono::milliseconds timeout, const char* op,
                   const std::vector<std::string>& keys) {
    DirectoryWatch watch(directory_);  // armed before the re-check below, so no write is missed
    auto deadline = core::deadline_after(timeout);
    bool blocking = false;
    core::WaitHooks hooks;
    hooks.before_block = [&] { blocking = true; };
    hooks.progress = [&] {
      if (blocking) watch.wait_for_change(deadline - core::Clock::now());
    };
    auto result = core::wait_until(ready, nullptr, deadline, hooks);
    if (result == core::WaitResult::Ready || ready()) return;  // ready(): it may have appeared just at the deadline
    std::vector<std::string> missing;
    for (const auto& key : keys) {
      if (!exists(key)) missing.push_back(key);
    }
    if (result == core::WaitResult::Aborted) {
      throw Error(
          ErrorCode::InvalidState, std::string(op) + " aborted while waiting for " + printable_keys(missing),
          ErrorContext{
              .op = op, .peer_addr = address_, .hint = "rdmx::core::abort_waits() was called (communicator abort)"});
    }
    throw Error(ErrorCode::Timeout,
                std::string(op) + ": key" + (missing.size() == 1 ? " " : "s ") + printable_keys(missing) +
                    " did not appear in file store " + directory_ + " within " + describe_timeout(timeout),
                ErrorContext{.op = op,
                             .peer_addr = address_,
                             .sizes = "missing=" + std::to_string(missing.size()) + "/" + std::to_string(keys.size()) +
                                      " timeout=" + describe_timeout(timeout),
                             .hint = kMissingKeyHint});
  }

  std::string directory_;
  std::string address_;
  core::Mutex mutex_;  // one LockedSection at a time among this process's threads
};

}  // namespace
}  // namespace bootstrap

std::unique_ptr<Store> open_file_store(const std::string& directory) {
  return std::make_unique<bootstrap::FileStore>(directory);
}

}  // namespace rdmx
