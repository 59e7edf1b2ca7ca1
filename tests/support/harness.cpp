// SPDX-License-Identifier: MIT
#include "support/harness.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

#include "services/config.hpp"

namespace rdmx::test {
namespace {

using Clock = std::chrono::steady_clock;

// Tests run under ctest with RDMX_TIMEOUT=20 and RDMX_RNR_TIMEOUT=500ms; give
// a test binary started by hand the same settings, so that it behaves (and
// fails) the same way.
const bool g_env_defaults = [] {
  ::setenv("RDMX_TIMEOUT", "20", 0);
  ::setenv("RDMX_RNR_TIMEOUT", "500ms", 0);
  return true;
}();

int g_rank = -1;                                     // set in a child
std::string g_failure_path;                          // where a child records its failure for the parent
std::vector<std::function<std::string()>> g_traces;  // ScopedTrace stack

void write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

void flush_stdio() {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
}

[[noreturn]] void child_exit(int code) {
  flush_stdio();
  ::_exit(code);
}

std::string signal_name(int sig) {
  const char* name = ::sigabbrev_np(sig);
  std::string out = name != nullptr ? std::string("SIG") + name : "signal " + std::to_string(sig);
  const char* desc = ::sigdescr_np(sig);
  if (desc != nullptr) out += std::string(" (") + desc + ")";
  return out;
}

// Runs a command (no shell) and returns its exit status and combined output.
struct CommandResult {
  int status = -1;
  std::string output;
};

CommandResult run_command(const std::vector<std::string>& argv) {
  CommandResult result;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    result.output = std::string("pipe: ") + std::strerror(errno);
    return result;
  }
  flush_stdio();
  pid_t pid = ::fork();
  if (pid < 0) {
    result.output = std::string("fork: ") + std::strerror(errno);
    ::close(fds[0]);
    ::close(fds[1]);
    return result;
  }
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::string msg = "exec " + argv[0] + ": " + std::strerror(errno) + "\n";
    write_all(2, msg);
    ::_exit(127);
  }
  ::close(fds[1]);
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    result.output.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::string join(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    out += a;
  }
  return out;
}

// ---------------------------------------------------------------------------
// Network namespaces.

constexpr const char* kNsPrefix = "rdmxt-";
constexpr const char* kNetnsDir = "/var/run/netns";

std::optional<NetNsPair> g_pair;
std::string g_pair_error;
pid_t g_pair_owner = -1;

void delete_netns(const std::string& name) { run_command({"ip", "netns", "del", name}); }

// Removes namespaces left behind by test processes that no longer exist.
void remove_stale_namespaces() {
  DIR* dir = ::opendir(kNetnsDir);
  if (dir == nullptr) return;
  std::vector<std::string> stale;
  while (dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (name.rfind(kNsPrefix, 0) != 0) continue;
    std::string rest = name.substr(std::strlen(kNsPrefix));
    auto dash = rest.find('-');
    if (dash == std::string::npos) continue;
    long pid = std::strtol(rest.substr(0, dash).c_str(), nullptr, 10);
    if (pid <= 0) continue;
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) stale.push_back(name);
  }
  ::closedir(dir);
  for (const auto& name : stale) delete_netns(name);
}

void destroy_at_exit() { NetNsPair::destroy(); }

NetNsPair create_pair() {
  if (::geteuid() != 0) {
    throw std::runtime_error(
        "the NetNs placements need root: they create network namespaces and a veth pair with `ip netns add` / "
        "`ip link add` (euid is " +
        std::to_string(::geteuid()) +
        "); run the tests as root, or leave these cases out with --gtest_filter=-*NetNs*");
  }
  if (run_command({"ip", "-V"}).status != 0) {
    throw std::runtime_error("the NetNs placements need the `ip` command (Debian package iproute2)");
  }
  remove_stale_namespaces();
  std::string pid = std::to_string(::getpid());
  NetNsPair pair;
  pair.ns[0] = kNsPrefix + pid + "-a";
  pair.ns[1] = kNsPrefix + pid + "-b";
  pair.ifname[0] = "rdmxt" + pid + "a";  // <= 15 characters (IFNAMSIZ)
  pair.ifname[1] = "rdmxt" + pid + "b";
  pair.ipv4[0] = "10.201.0.1";
  pair.ipv4[1] = "10.201.0.2";
  pair.ipv6[0] = "fd00:201::1";
  pair.ipv6[1] = "fd00:201::2";

  std::vector<std::vector<std::string>> commands = {
      {"ip", "netns", "add", pair.ns[0]},
      {"ip", "netns", "add", pair.ns[1]},
      {"ip", "link", "add", pair.ifname[0], "type", "veth", "peer", "name", pair.ifname[1]},
      {"ip", "link", "set", pair.ifname[0], "netns", pair.ns[0]},
      {"ip", "link", "set", pair.ifname[1], "netns", pair.ns[1]},
  };
  for (int i = 0; i < 2; ++i) {
    commands.push_back({"ip", "-n", pair.ns[i], "link", "set", "lo", "up"});
    commands.push_back({"ip", "-n", pair.ns[i], "addr", "add", pair.ipv4[i] + "/24", "dev", pair.ifname[i]});
    commands.push_back(
        {"ip", "-n", pair.ns[i], "-6", "addr", "add", pair.ipv6[i] + "/64", "dev", pair.ifname[i], "nodad"});
  }
  for (int i = 0; i < 2; ++i) commands.push_back({"ip", "-n", pair.ns[i], "link", "set", pair.ifname[i], "up"});

  for (const auto& cmd : commands) {
    CommandResult r = run_command(cmd);
    if (r.status != 0) {
      delete_netns(pair.ns[0]);
      delete_netns(pair.ns[1]);
      run_command({"ip", "link", "del", pair.ifname[0]});
      throw std::runtime_error("creating the test network namespaces failed: `" + join(cmd) + "` exited with " +
                               std::to_string(r.status) + ": " + r.output);
    }
  }
  return pair;
}

// ---------------------------------------------------------------------------
// Children.

struct RankSetup {
  int rank;
  int world_size;
  Placement placement;
  std::string provider;
  std::string dir;
  std::string netns;  // empty: stay in the current namespace
  std::string ifname;
  std::string ip;
  pid_t parent;
};

std::string failure_path(const std::string& dir, int rank) { return dir + "/rank" + std::to_string(rank) + ".failure"; }

[[noreturn]] void child_main(const RankSetup& setup, const RankBody& body) {
  // Die with the test process, whatever happens to it.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != setup.parent) ::_exit(3);
  g_rank = setup.rank;
  g_failure_path = failure_path(setup.dir, setup.rank);
  rdmx::core::set_current_rank(setup.rank);

  if (!setup.netns.empty()) {
    std::string path = std::string(kNetnsDir) + "/" + setup.netns;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail_rank(__FILE__, __LINE__, "open " + path + ": " + std::strerror(errno));
    if (::setns(fd, CLONE_NEWNET) != 0) {
      fail_rank(__FILE__, __LINE__, "setns(" + path + ", CLONE_NEWNET): " + std::strerror(errno));
    }
    ::close(fd);
  }
  ::setenv("RDMX_SOCKET_IFNAME", setup.ifname.c_str(), 1);
  switch (setup.placement) {
    case Placement::Local: ::unsetenv("RDMX_SOCKET_FAMILY"); break;
    case Placement::NetNsIPv4: ::setenv("RDMX_SOCKET_FAMILY", "AF_INET", 1); break;
    case Placement::NetNsIPv6: ::setenv("RDMX_SOCKET_FAMILY", "AF_INET6", 1); break;
  }

  try {
    RankEnv env(setup.rank, setup.world_size, setup.placement, setup.provider, setup.dir, setup.ifname, setup.ip);
    body(env);
  } catch (const rdmx::Error& e) {
    fail_rank("(rank body)", 0, std::string("uncaught rdmx::Error (") + rdmx::to_string(e.code()) + "): " + e.what());
  } catch (const std::exception& e) {
    fail_rank("(rank body)", 0, std::string("uncaught exception: ") + e.what());
  } catch (...) {
    fail_rank("(rank body)", 0, "uncaught exception of unknown type");
  }
  child_exit(0);
}

struct Child {
  pid_t pid = -1;
  int pidfd = -1;
  bool running = false;
  int status = 0;
  Clock::time_point ended;
  enum class Killed { No, Hung, AfterFailure } killed = Killed::No;
  std::string stacks;  // where it sat when it was killed, if gdb could tell
};

// The threads' stacks of a live process, from gdb when it is installed: a
// rank killed as hung says where it waited, which a CI log otherwise loses.
// Bounded by `timeout`; an empty string when gdb is absent or fails.
std::string stacks_of(pid_t pid) {
  if (::access("/usr/bin/gdb", X_OK) != 0 || std::getenv("RDMX_TEST_NO_STACKS") != nullptr) return "";
  const std::string command = "timeout -s KILL 30 /usr/bin/gdb -nx -batch -p " + std::to_string(pid) +
                              " -ex 'thread apply all bt 25' 2>/dev/null";
  std::string out;
  if (FILE* pipe = ::popen(command.c_str(), "r")) {
    char line[512];
    while (std::fgets(line, sizeof line, pipe) != nullptr && out.size() < 16384) {
      if (line[0] == '#' || std::strncmp(line, "Thread ", 7) == 0) out += std::string("      ") + line;
    }
    ::pclose(pipe);
  }
  return out;
}

int thread_count() {
  int count = 0;
  if (DIR* dir = ::opendir("/proc/self/task")) {
    while (dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] != '.') ++count;
    }
    ::closedir(dir);
  }
  return count;
}

bool is_expected_death(const Options& options, int rank, int status) {
  for (int r : options.may_be_killed) {
    if (r == rank && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) return true;
  }
  return false;
}

bool succeeded(const Options& options, int rank, const Child& child) {
  if (child.killed != Child::Killed::No) return false;
  if (WIFEXITED(child.status) && WEXITSTATUS(child.status) == 0) return true;
  return is_expected_death(options, rank, child.status);
}

}  // namespace

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void log_to_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  CHECK(fd >= 0) << "cannot open " << path << " for the log: " << std::strerror(errno);
  ::dup2(fd, 2);
  ::close(fd);
}

const char* to_string(Placement placement) noexcept {
  switch (placement) {
    case Placement::Local: return "Local";
    case Placement::NetNsIPv4: return "NetNsIPv4";
    case Placement::NetNsIPv6: return "NetNsIPv6";
  }
  return "?";
}

int current_rank() noexcept { return g_rank; }

ScopedTrace::ScopedTrace(std::function<std::string()> describe) { g_traces.push_back(std::move(describe)); }
ScopedTrace::~ScopedTrace() { g_traces.pop_back(); }

void fail_rank(const char* file, int line, const std::string& message) {
  std::string text = "rank " + std::to_string(g_rank) + ": " + file + ":" + std::to_string(line) + ": " + message;
  auto traces = std::move(g_traces);  // a trace that fails must not recurse
  g_traces.clear();
  for (auto it = traces.rbegin(); it != traces.rend(); ++it) {
    try {
      text += "\n      while: " + (*it)();
    } catch (...) {
      text += "\n      while: <trace threw>";
    }
  }
  flush_stdio();
  write_all(2, "[rdmx test] " + text + "\n");
  if (!g_failure_path.empty()) {
    int fd = ::open(g_failure_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      write_all(fd, text + "\n");
      ::close(fd);
    }
  }
  if (g_rank < 0) std::abort();  // used outside a rank: a bug in the test
  ::_exit(1);
}

Error expect_error(ErrorCode code, const std::function<void()>& fn, const char* what, const char* file, int line) {
  try {
    fn();
  } catch (const Error& e) {
    if (e.code() != code) {
      fail_rank(file, line,
                std::string(what) + " threw rdmx::Error with code " + to_string(e.code()) + ", expected " +
                    to_string(code) + ": " + e.what());
    }
    return e;
  } catch (const std::exception& e) {
    fail_rank(
        file, line,
        std::string(what) + " threw a non-rdmx exception, expected rdmx::Error(" + to_string(code) + "): " + e.what());
  }
  fail_rank(file, line, std::string(what) + " did not throw; expected rdmx::Error(" + to_string(code) + ")");
}

// ---------------------------------------------------------------------------

RankEnv::RankEnv(int rank, int world_size, Placement placement, std::string provider, std::string dir,
                 std::string ifname, std::string ip)
    : rank_(rank),
      world_size_(world_size),
      placement_(placement),
      provider_(std::move(provider)),
      dir_(std::move(dir)),
      ifname_(std::move(ifname)),
      ip_(std::move(ip)) {}

RankEnv::~RankEnv() = default;

Store& RankEnv::store() { return *store_ptr(); }

std::shared_ptr<Store> RankEnv::store_ptr() {
  if (!store_) store_ = rdmx::open_file_store(dir_ + "/store");
  return store_;
}

std::shared_ptr<Device> RankEnv::device_ptr() {
  if (!device_) device_ = rdmx::open_device(provider_);
  return device_;
}

Device& RankEnv::device() { return *device_ptr(); }

void RankEnv::barrier(const std::string& name) {
  std::string base = "rdmx-test/barrier/" + std::to_string(barriers_++) + "/" + name + "/";
  store().set(base + std::to_string(rank_), std::string_view("1"));
  std::vector<std::string> keys;
  for (int r = 0; r < world_size_; ++r) keys.push_back(base + std::to_string(r));
  store().wait(keys);
}

void RankEnv::kill_self() {
  flush_stdio();
  ::raise(SIGKILL);
  ::_exit(9);  // not reached
}

// ---------------------------------------------------------------------------

const NetNsPair& NetNsPair::get() {
  if (g_pair) return *g_pair;
  if (!g_pair_error.empty()) throw std::runtime_error(g_pair_error);
  try {
    g_pair = create_pair();
    g_pair_owner = ::getpid();
    static const bool registered = [] { return std::atexit(destroy_at_exit) == 0; }();
    (void)registered;
  } catch (const std::exception& e) {
    g_pair_error = e.what();
    throw;
  }
  return *g_pair;
}

void NetNsPair::destroy() noexcept {
  if (!g_pair || g_pair_owner != ::getpid()) return;
  try {
    delete_netns(g_pair->ns[0]);
    delete_netns(g_pair->ns[1]);
  } catch (...) {
  }
  g_pair.reset();
}

// ---------------------------------------------------------------------------

::testing::AssertionResult run_ranks(int n, Placement placement, const RankBody& body, const Options& options) {
  if (n < 1) return ::testing::AssertionFailure() << "run_ranks: n must be >= 1 (got " << n << ")";
  if (int threads = thread_count(); threads > 1) {
    return ::testing::AssertionFailure()
           << "run_ranks: the test process has " << threads
           << " threads; forking ranks from a multi-threaded process is unsafe (did the test open a device or "
              "start a thread in the parent? do that inside the rank body)";
  }
  const NetNsPair* pair = nullptr;
  if (is_netns(placement)) {
    try {
      pair = &NetNsPair::get();
    } catch (const std::exception& e) {
      return ::testing::AssertionFailure() << "placement " << to_string(placement) << ": " << e.what();
    }
  }

  char tmpl[] = "/tmp/rdmx-test-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    return ::testing::AssertionFailure() << "mkdtemp: " << std::strerror(errno);
  }
  const std::string dir = tmpl;
  std::filesystem::create_directories(dir + "/store");

  std::vector<Child> children(static_cast<std::size_t>(n));
  const pid_t parent = ::getpid();
  const auto start = Clock::now();
  flush_stdio();  // a child must not inherit (and later print) buffered output
  for (int r = 0; r < n; ++r) {
    RankSetup setup{r, n, placement, options.provider, dir, "", "lo", "127.0.0.1", parent};
    if (pair != nullptr) {
      int i = NetNsPair::index_of(r);
      setup.netns = pair->ns[i];
      setup.ifname = pair->ifname[i];
      setup.ip = placement == Placement::NetNsIPv6 ? pair->ipv6[i] : pair->ipv4[i];
    }
    pid_t pid = ::fork();
    if (pid < 0) {
      int err = errno;
      for (auto& c : children) {
        if (c.running) ::kill(c.pid, SIGKILL);
      }
      for (auto& c : children) {
        if (c.running) ::waitpid(c.pid, nullptr, 0);
      }
      std::filesystem::remove_all(dir);
      return ::testing::AssertionFailure() << "fork for rank " << r << ": " << std::strerror(err);
    }
    if (pid == 0) child_main(setup, body);
    auto& c = children[static_cast<std::size_t>(r)];
    c.pid = pid;
    c.running = true;
    c.pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  }

  const auto deadline = start + options.timeout;
  std::optional<Clock::time_point> grace_deadline;
  int first_failed = -1;
  auto reap = [&] {
    for (int r = 0; r < n; ++r) {
      auto& c = children[static_cast<std::size_t>(r)];
      if (!c.running) continue;
      int status = 0;
      pid_t got = ::waitpid(c.pid, &status, WNOHANG);
      if (got == c.pid) {
        c.running = false;
        c.status = status;
        c.ended = Clock::now();
        if (!succeeded(options, r, c) && first_failed < 0) {
          first_failed = r;
          grace_deadline = c.ended + options.failure_grace;
        }
      }
    }
  };
  auto any_running = [&] {
    for (const auto& c : children) {
      if (c.running) return true;
    }
    return false;
  };

  for (reap(); any_running(); reap()) {
    auto now = Clock::now();
    auto until = deadline;
    if (grace_deadline && *grace_deadline < until) until = *grace_deadline;
    if (now >= until) {
      Child::Killed why =
          (grace_deadline && *grace_deadline <= deadline) ? Child::Killed::AfterFailure : Child::Killed::Hung;
      for (auto& c : children) {
        if (!c.running) continue;
        c.stacks = stacks_of(c.pid);
        ::kill(c.pid, SIGKILL);
        ::waitpid(c.pid, &c.status, 0);
        c.running = false;
        c.ended = Clock::now();
        c.killed = why;
      }
      break;
    }
    std::vector<pollfd> fds;
    bool all_pidfds = true;
    for (const auto& c : children) {
      if (!c.running) continue;
      if (c.pidfd >= 0) {
        fds.push_back(pollfd{c.pidfd, POLLIN, 0});
      } else {
        all_pidfds = false;
      }
    }
    auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count() + 1;
    if (!all_pidfds && wait_ms > 5) wait_ms = 5;  // no pidfd support: poll waitpid
    ::poll(fds.data(), fds.size(), static_cast<int>(wait_ms));
  }
  for (auto& c : children) {
    if (c.pidfd >= 0) ::close(c.pidfd);
  }

  bool ok = true;
  std::ostringstream report;
  for (int r = 0; r < n; ++r) {
    const auto& c = children[static_cast<std::size_t>(r)];
    if (succeeded(options, r, c)) continue;
    ok = false;
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(c.ended - start).count();
    report << "\n  rank " << r << " (pid " << c.pid << ", " << to_string(placement) << "): ";
    switch (c.killed) {
      case Child::Killed::Hung:
        report << "HUNG: still running when the " << options.timeout.count()
               << " ms deadline passed; killed with SIGKILL";
        break;
      case Child::Killed::AfterFailure:
        report << "still running " << options.failure_grace.count() << " ms after rank " << first_failed
               << " failed; killed with SIGKILL";
        break;
      case Child::Killed::No:
        if (WIFEXITED(c.status)) {
          report << "exited with status " << WEXITSTATUS(c.status) << " after " << ms << " ms";
        } else if (WIFSIGNALED(c.status)) {
          report << "killed by " << signal_name(WTERMSIG(c.status)) << " after " << ms << " ms";
          if (WCOREDUMP(c.status)) report << " (core dumped)";
        }
        break;
    }
    std::string message = read_file(failure_path(dir, r));
    while (!message.empty() && message.back() == '\n') message.pop_back();
    if (!message.empty()) report << "\n    " << message;
    if (!c.stacks.empty()) report << "\n    where it was (gdb):\n" << c.stacks;
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << n << " rank(s), provider " << options.provider << ", placement "
                                       << to_string(placement) << ":" << report.str();
}

}  // namespace rdmx::test
