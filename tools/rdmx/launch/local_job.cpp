// SPDX-License-Identifier: MIT
#include "launch/local_job.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>

#include "cli/commands.hpp"
#include "launch/oom_watch.hpp"
#include "rdmx/bootstrap.hpp"
#include "rdmx/error.hpp"

extern char** environ;

namespace rdmx::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Set by the signal handler; the loop passes the signal on to the ranks.
volatile sig_atomic_t g_forward_signal = 0;
void remember_signal(int signo) { g_forward_signal = signo; }

// Finds `name` in PATH before fork, so a missing program is reported once,
// clearly, instead of by every rank.
std::string resolve_program(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    if (::access(name.c_str(), X_OK) != 0) {
      throw Error(ErrorCode::NotFound, "cannot run \"" + name + "\": " + std::strerror(errno),
                  {.op = "rdmx run", .hint = "give the path of an executable"});
    }
    return name;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const std::size_t colon = std::min(dirs.find(':', start), dirs.size());
    std::string dir = dirs.substr(start, colon - start);
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + name;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    start = colon + 1;
  }
  throw Error(ErrorCode::NotFound, "command \"" + name + "\" not found in PATH",
              {.op = "rdmx run", .hint = "give its path, e.g. ./build/examples/" + name});
}

// A port the kernel considers free on loopback now, for torch's rendezvous
// (MASTER_PORT); as torchrun, the rank that binds it later may race another
// process, and torch then says which port was taken.
int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error(ErrorCode::System, std::string("socket: ") + std::strerror(errno), {.op = "rdmx run"});
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  const int saved = errno;
  ::close(fd);
  if (!ok) {
    throw Error(ErrorCode::System, std::string("picking a port for MASTER_PORT: ") + std::strerror(saved),
                {.op = "rdmx run", .hint = "set MASTER_PORT yourself"});
  }
  return ntohs(addr.sin_port);
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int signo = WTERMSIG(status);
    const char* abbrev = sigabbrev_np(signo);
    std::string text = "was killed by signal " + std::to_string(signo);
    if (abbrev != nullptr) text += std::string(" (SIG") + abbrev + ")";
    if (WCOREDUMP(status)) text += ", core dumped";
    return text;
  }
  return "ended with wait status " + std::to_string(status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

struct Stream {
  int fd = -1;
  int rank = 0;
  bool is_stderr = false;
  std::string pending;  // bytes after the last newline
};

struct TailLine {
  std::string text;
  bool on_stderr = false;  // already on our stderr, as itself or as another rank's identical line
};

struct Rank {
  pid_t pid = -1;
  bool running = true;
  int status = 0;
  std::deque<TailLine> tail;
  std::string last_stderr_key;  // its last stderr line, normalised: how it failed, for "the same way"
  std::size_t held_back = 0;    // error lines not printed: another rank had printed the same
};

// A line as it reads with this rank's own number taken out ("rank=1", "rank 1"),
// so N ranks failing with one error give one key.
std::string normalise(std::string_view line, int rank) {
  const std::string r = std::to_string(rank);
  std::string out;
  out.reserve(line.size());
  for (std::size_t i = 0; i < line.size();) {
    bool replaced = false;
    for (const std::string_view prefix : {std::string_view("rank="), std::string_view("rank ")}) {
      const std::size_t end = i + prefix.size() + r.size();
      if (line.substr(i, prefix.size()) == prefix && line.substr(i + prefix.size(), r.size()) == r &&
          (end == line.size() || std::isdigit(static_cast<unsigned char>(line[end])) == 0)) {
        out.append(prefix).append("#");
        i = end;
        replaced = true;
        break;
      }
    }
    if (!replaced) out.push_back(line[i++]);
  }
  return out;
}

// Beyond this many distinct lines a chatty job's stderr is passed on without
// looking for repeats, so memory stays bounded.
constexpr std::size_t kMaxRememberedLines = 10000;

// An rdmx::Error as a program prints it: "...rdmx: <message> [<kind>, ...".
// Only these are shown once for all ranks; any other line is the program's
// own and every rank's copy is shown.
bool is_rdmx_error(std::string_view line) {
  static constexpr std::string_view kKinds[] = {
      "invalid argument", "invalid state",  "not supported", "not found",    "timeout",
      "peer failure",     "protocol error", "queue full",    "system error", "configuration error"};
  const std::size_t start = line.find("rdmx: ");
  if (start == std::string_view::npos) return false;
  for (std::size_t open = line.find(" [", start); open != std::string_view::npos; open = line.find(" [", open + 2)) {
    for (const std::string_view kind : kKinds) {
      if (line.substr(open + 2, kind.size()) == kind) return true;
    }
  }
  return false;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

class Job {
 public:
  explicit Job(const LocalJobOptions& options) : options_(options) {}

  LocalJobResult run() {
    if (options_.ranks < 1) {
      throw Error(ErrorCode::InvalidArgument,
                  "the number of ranks must be at least 1, got " + std::to_string(options_.ranks),
                  {.op = options_.name});
    }
    if (options_.command.empty()) {
      throw Error(ErrorCode::InvalidArgument, "no command to run",
                  {.op = options_.name, .hint = "rdmx run -n 2 -- ./my_program args"});
    }
    const std::string program = resolve_program(options_.command.front());
    serve_store();
    struct sigaction forward {};
    forward.sa_handler = remember_signal;  // no SA_RESTART: poll() returns at once
    struct sigaction old_int {
    }, old_term{}, old_pipe{};
    ::sigaction(SIGINT, &forward, &old_int);
    ::sigaction(SIGTERM, &forward, &old_term);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ignore, &old_pipe);
    g_forward_signal = 0;

    LocalJobResult result;
    try {
      start_ranks(program);
      result = watch();
    } catch (...) {
      stop_all(SIGKILL);
      reap_all();
      cleanup(old_int, old_term, old_pipe);
      throw;
    }
    cleanup(old_int, old_term, old_pipe);
    if (!result.failure.empty() && options_.output != OutputMode::Capture) report(result);
    if (options_.output != OutputMode::Capture) report_held_back();
    result.rank0_stdout = std::move(captured_);
    return result;
  }

 private:
  void cleanup(const struct sigaction& old_int, const struct sigaction& old_term, const struct sigaction& old_pipe) {
    ::sigaction(SIGINT, &old_int, nullptr);
    ::sigaction(SIGTERM, &old_term, nullptr);
    ::sigaction(SIGPIPE, &old_pipe, nullptr);
    for (auto& s : streams_) {
      if (s.fd >= 0) ::close(s.fd);
      s.fd = -1;
    }
    store_.reset();
  }

  // One secret per job, unless the user gave theirs: the ranks' connections
  // and the store served here prove it. It goes into this process's
  // environment, which the server reads and every rank inherits.
  void adopt_job_secret() const {
    for (const char* name : {"RDMX_AUTH_KEY", "RDMX_AUTH_KEY_FILE"}) {
      auto given = options_.env.find(name);
      if (given != options_.env.end()) ::setenv(name, given->second.c_str(), 1);
    }
    if (std::getenv("RDMX_AUTH_KEY") == nullptr && std::getenv("RDMX_AUTH_KEY_FILE") == nullptr) {
      ::setenv("RDMX_AUTH_KEY", new_job_secret().c_str(), 0);
    }
  }

  // The job's store lives here rather than in rank 0, so it outlives any rank
  // (shrink and grow need that) and a rank's store requests go to a server
  // that no rank's CPU work delays. The stop signals stay blocked on its
  // thread, so they reach watch()'s poll.
  void serve_store() {
    adopt_job_secret();
    // Blocked while the server's thread starts, which inherits the mask.
    struct StopSignalsBlocked {
      sigset_t previous;
      StopSignalsBlocked() {
        sigset_t stop_signals;
        sigemptyset(&stop_signals);
        sigaddset(&stop_signals, SIGINT);
        sigaddset(&stop_signals, SIGTERM);
        ::pthread_sigmask(SIG_BLOCK, &stop_signals, &previous);
      }
      ~StopSignalsBlocked() { ::pthread_sigmask(SIG_SETMASK, &previous, nullptr); }
    } const blocked;
    store_ = std::make_unique<TcpStoreServer>("127.0.0.1", 0);
  }

  // Everything a child needs is built before fork: the parent may have
  // threads (an open device's engine), so the child only calls exec-safe code.
  void start_ranks(const std::string& program) {
    std::vector<std::string> argv_text = options_.command;
    std::vector<char*> argv;
    for (auto& a : argv_text) argv.push_back(a.data());
    argv.push_back(nullptr);

    // This process's environment and the job's additions, once; each rank adds its place.
    std::map<std::string, std::string> job_env;
    for (char** e = environ; *e != nullptr; ++e) {
      const char* eq = std::strchr(*e, '=');
      if (eq != nullptr) job_env[std::string(*e, static_cast<std::size_t>(eq - *e))] = eq + 1;
    }
    for (const auto& [key, value] : options_.env) job_env[key] = value;
    job_env["RDMX_WORLD_SIZE"] = std::to_string(options_.ranks);
    job_env["RDMX_LOCAL_WORLD_SIZE"] = std::to_string(options_.ranks);
    job_env["RDMX_STORE"] = "127.0.0.1:" + std::to_string(store_->port());
    job_env["RDMX_STORE_EXTERNAL"] = "1";
    // torch's env:// variables, as torchrun sets them, so torch.distributed
    // programs run unchanged under rdmx run (their store is torch's own).
    job_env["WORLD_SIZE"] = job_env["LOCAL_WORLD_SIZE"] = std::to_string(options_.ranks);
    if (!job_env.contains("MASTER_ADDR")) job_env["MASTER_ADDR"] = "127.0.0.1";
    if (!job_env.contains("MASTER_PORT")) job_env["MASTER_PORT"] = std::to_string(free_loopback_port());

    ranks_.resize(static_cast<std::size_t>(options_.ranks));
    started_ = Clock::now();
    for (int r = 0; r < options_.ranks; ++r) {
      std::map<std::string, std::string> env = job_env;
      env["RDMX_RANK"] = std::to_string(r);
      env["RDMX_LOCAL_RANK"] = std::to_string(r);
      env["RANK"] = env["LOCAL_RANK"] = std::to_string(r);
      std::vector<std::string> env_text;
      for (const auto& [key, value] : env) env_text.push_back(key + "=" + value);
      std::vector<char*> envp;
      for (auto& e : env_text) envp.push_back(e.data());
      envp.push_back(nullptr);

      int out_pipe[2];
      int err_pipe[2];
      if (::pipe2(out_pipe, O_CLOEXEC) != 0)
        throw Error(ErrorCode::System, std::string("pipe2: ") + std::strerror(errno));
      if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
        ::close(out_pipe[0]);
        ::close(out_pipe[1]);
        throw Error(ErrorCode::System, std::string("pipe2: ") + std::strerror(errno));
      }
      std::fflush(stdout);
      std::fflush(stderr);
      const pid_t pid = ::fork();
      if (pid < 0) {
        throw Error(ErrorCode::System, "fork for rank " + std::to_string(r) + ": " + std::strerror(errno),
                    {.op = options_.name});
      }
      if (pid == 0) {
        ::setpgid(0, group_);  // rank 0 leads the group; a signal to it reaches every rank's children too
        // Ranks run outside the terminal's foreground group, where reading it would stop them.
        if (const int null_fd = ::open("/dev/null", O_RDONLY); null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
        ::dup2(out_pipe[1], STDOUT_FILENO);
        ::dup2(err_pipe[1], STDERR_FILENO);
        ::signal(SIGINT, SIG_DFL);
        ::signal(SIGTERM, SIG_DFL);
        ::signal(SIGPIPE, SIG_DFL);
        ::execve(program.c_str(), argv.data(), envp.data());
        const char* what = std::strerror(errno);
        (void)!::write(STDERR_FILENO, "execve failed: ", 15);
        (void)!::write(STDERR_FILENO, what, std::strlen(what));
        (void)!::write(STDERR_FILENO, "\n", 1);
        ::_exit(127);
      }
      ::setpgid(pid, group_);
      if (group_ == 0) group_ = pid;
      ::close(out_pipe[1]);
      ::close(err_pipe[1]);
      ranks_[static_cast<std::size_t>(r)].pid = pid;
      streams_.push_back({out_pipe[0], r, false, {}});
      streams_.push_back({err_pipe[0], r, true, {}});
    }
  }

  void keep_in_tail(Rank& rank, std::string_view line, bool on_stderr) {
    rank.tail.push_back({std::string(line), on_stderr});
    if (rank.tail.size() > options_.tail_lines) rank.tail.pop_front();
  }

  // Whether another rank already put this error line (up to its rank number)
  // on stderr: N ranks that fail alike print one error, not N.
  bool repeats_another_rank(int rank, const std::string& key) {
    if (const auto it = first_printer_.find(key); it != first_printer_.end()) return it->second != rank;
    if (first_printer_.size() < kMaxRememberedLines) first_printer_.emplace(key, rank);
    return false;
  }

  void emit(Stream& s, std::string_view line) {
    Rank& rank = ranks_[static_cast<std::size_t>(s.rank)];
    if (s.is_stderr) rank.last_stderr_key = normalise(line, s.rank);
    if (options_.output == OutputMode::Capture) {
      keep_in_tail(rank, line, false);
      if (s.rank == 0 && !s.is_stderr) {
        captured_.append(line);
        captured_.push_back('\n');
      }
      return;
    }
    if (options_.output == OutputMode::Rank0Plain && s.rank == 0 && !s.is_stderr) {
      keep_in_tail(rank, line, false);
      std::fwrite(line.data(), 1, line.size(), stdout);
      std::fputc('\n', stdout);
      std::fflush(stdout);
      return;
    }
    const bool to_stderr = s.is_stderr || options_.output == OutputMode::Rank0Plain;
    keep_in_tail(rank, line, to_stderr);
    if (to_stderr && is_rdmx_error(line) && repeats_another_rank(s.rank, normalise(line, s.rank))) {
      ++rank.held_back;
      return;
    }
    std::FILE* sink = to_stderr ? stderr : stdout;
    std::fprintf(sink, "[%d] %.*s\n", s.rank, static_cast<int>(line.size()), line.data());
    std::fflush(sink);
  }

  void drain(Stream& s) {
    char buffer[16384];
    const ssize_t n = ::read(s.fd, buffer, sizeof buffer);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {
      if (!s.pending.empty()) emit(s, s.pending);
      s.pending.clear();
      ::close(s.fd);
      s.fd = -1;
      return;
    }
    s.pending.append(buffer, static_cast<std::size_t>(n));
    std::size_t start = 0;
    for (std::size_t nl; (nl = s.pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      emit(s, std::string_view(s.pending).substr(start, nl - start));
    }
    s.pending.erase(0, start);
    // A rank that never ends its line still gets seen.
    if (s.pending.size() > 65536) {
      emit(s, s.pending);
      s.pending.clear();
    }
  }

  void stop_all(int signo) {
    if (group_ > 0) ::kill(-group_, signo);
    for (const auto& r : ranks_) {
      if (r.running && r.pid > 0) ::kill(r.pid, signo);
    }
  }

  void reap_all() {
    for (auto& r : ranks_) {
      if (r.running && r.pid > 0) {
        ::waitpid(r.pid, &r.status, 0);
        r.running = false;
      }
    }
  }

  // Collects exits; returns the first failure seen in this pass, or -1.
  int collect_exits() {
    int failed = -1;
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      Rank& r = ranks_[i];
      if (!r.running) continue;
      const pid_t got = ::waitpid(r.pid, &r.status, WNOHANG);
      if (got != r.pid) continue;
      r.running = false;
      if ((!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0) && failed < 0) failed = static_cast<int>(i);
    }
    return failed;
  }

  std::string running_list() const {
    std::string out;
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      if (ranks_[i].running) out += (out.empty() ? "" : ", ") + std::to_string(i);
    }
    return out;
  }

  LocalJobResult watch() {
    LocalJobResult result;
    bool stopping = false;
    Clock::time_point kill_at{};
    Clock::time_point drain_until{};
    bool all_exited = false;
    const bool limited = options_.time_limit.count() > 0;
    const auto limit_at = started_ + options_.time_limit;
    for (;;) {
      std::vector<pollfd> fds;
      std::vector<Stream*> owners;
      for (auto& s : streams_) {
        if (s.fd >= 0) {
          fds.push_back({s.fd, POLLIN, 0});
          owners.push_back(&s);
        }
      }
      if (all_exited && (fds.empty() || Clock::now() > drain_until)) break;
      const int ready = ::poll(fds.data(), fds.size(), 100);
      if (ready > 0) {
        for (std::size_t i = 0; i < fds.size(); ++i) {
          if (fds[i].revents != 0) drain(*owners[i]);
        }
      }
      if (const int signo = g_forward_signal; signo != 0) {
        g_forward_signal = 0;
        if (result.failure.empty()) {
          result.failure = std::string("interrupted by SIG") + sigabbrev_np(signo) + "; passed on to every rank";
          result.exit_code = 128 + signo;
        }
        stop_all(signo);
        if (!stopping) {
          stopping = true;
          kill_at = Clock::now() + std::chrono::seconds(2);
        }
      }
      if (!all_exited) {
        const int failed = collect_exits();
        if (failed >= 0 && result.failure.empty()) {
          const Rank& r = ranks_[static_cast<std::size_t>(failed)];
          const double after = std::chrono::duration<double>(Clock::now() - started_).count();
          const std::string others = running_list();
          char when[32];
          std::snprintf(when, sizeof when, "%.1f", after);
          result.failed_rank = failed;
          result.exit_code = exit_code_of(r.status);
          const std::string oom =
              WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGKILL ? oom_.explain_sigkill(r.pid) : "";
          result.failure = "rank " + std::to_string(failed) + " (pid " + std::to_string(r.pid) + ") " +
                           describe_status(r.status) + (oom.empty() ? "" : ", " + oom + ",") + " after " + when + " s" +
                           (others.empty() ? "" : "; stopping the other ranks still running (" + others + ")") +
                           (oom.empty() ? ""
                                        : "; the ranks need less memory (fewer ranks, a smaller RDMX_COLL_BUFFSIZE) "
                                          "or a host or cgroup with more");
        }
        if (limited && !stopping && result.failure.empty() && Clock::now() > limit_at) {
          result.exit_code = 124;
          result.failure = "the job ran past its time limit of " + std::to_string(options_.time_limit.count()) +
                           " s; stopping ranks " + running_list();
        }
        if (!result.failure.empty() && !stopping) {
          stopping = true;
          stop_all(SIGTERM);
          kill_at = Clock::now() + std::chrono::seconds(2);
        }
        if (stopping && Clock::now() > kill_at) stop_all(SIGKILL);
        if (running_list().empty()) {
          all_exited = true;
          // Grandchildren may hold the pipes open; their output gets a moment, not forever.
          drain_until = Clock::now() + std::chrono::seconds(2);
        }
      }
    }
    result.seconds = std::chrono::duration<double>(Clock::now() - started_).count();
    // A rank killed by a signal could not close its devices: what it left on this host goes now.
    if (std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return WIFSIGNALED(r.status); })) {
      remove_stale_endpoints();
    }
    if (result.failed_rank >= 0) {
      for (const auto& line : ranks_[static_cast<std::size_t>(result.failed_rank)].tail) {
        result.failed_tail.push_back(line.text);
      }
      result.failure += other_failures(result.failed_rank);
    }
    return result;
  }

  // The ranks that failed besides the first, told apart from those this job
  // stopped: "; 2 other ranks failed the same way (0, 3)" when they exited with
  // the same status after the same last stderr line, else each named.
  std::string other_failures(int first) const {
    const Rank& f = ranks_[static_cast<std::size_t>(first)];
    std::vector<int> same;
    std::string different;
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      const Rank& r = ranks_[i];
      if (static_cast<int>(i) == first || r.running) continue;
      const bool exited_badly = WIFEXITED(r.status) && WEXITSTATUS(r.status) != 0;
      const bool stopped_by_us =
          WIFSIGNALED(r.status) && (WTERMSIG(r.status) == SIGTERM || WTERMSIG(r.status) == SIGKILL);
      if (!exited_badly && (!WIFSIGNALED(r.status) || stopped_by_us)) continue;
      if (r.status == f.status && r.last_stderr_key == f.last_stderr_key) {
        same.push_back(static_cast<int>(i));
      } else {
        different += "; rank " + std::to_string(i) + " also failed: it " + describe_status(r.status);
      }
    }
    std::string out;
    if (same.size() == 1) out = "; 1 other rank failed the same way (rank " + rank_list(same) + ")";
    if (same.size() > 1) {
      out = "; " + std::to_string(same.size()) + " other ranks failed the same way (ranks " + rank_list(same) + ")";
    }
    return out + different;
  }

  // After the job: which rank failed and how, and its last lines, except
  // those already on stderr (its error is printed once, where it came out).
  void report(const LocalJobResult& result) const {
    std::fprintf(stderr, "%s: %s\n", options_.name.c_str(), result.failure.c_str());
    if (result.failed_rank < 0) return;
    const Rank& failed = ranks_[static_cast<std::size_t>(result.failed_rank)];
    if (failed.tail.empty()) {
      std::fprintf(stderr, "%s: rank %d printed nothing\n", options_.name.c_str(), result.failed_rank);
      return;
    }
    std::vector<const std::string*> recap;
    for (const auto& line : failed.tail) {
      if (!line.on_stderr) recap.push_back(&line.text);
    }
    if (recap.empty()) return;
    if (recap.size() == 1) {
      std::fprintf(stderr, "%s: the last line of rank %d on stdout:\n", options_.name.c_str(), result.failed_rank);
    } else {
      std::fprintf(stderr, "%s: the last %zu lines of rank %d on stdout:\n", options_.name.c_str(), recap.size(),
                   result.failed_rank);
    }
    for (const std::string* line : recap) std::fprintf(stderr, "  | %s\n", line->c_str());
  }

  // Lines held back as repeats, counted once at the end so nothing vanishes silently.
  void report_held_back() const {
    std::vector<int> from;
    std::size_t lines = 0;
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      if (ranks_[i].held_back == 0) continue;
      from.push_back(static_cast<int>(i));
      lines += ranks_[i].held_back;
    }
    if (lines == 0) return;
    std::fprintf(stderr,
                 "%s: %zu error line%s of rank%s %s %s not shown again: another rank had printed the same "
                 "(rank numbers aside)\n",
                 options_.name.c_str(), lines, lines == 1 ? "" : "s", from.size() == 1 ? "" : "s",
                 rank_list(from).c_str(), lines == 1 ? "was" : "were");
  }

  const LocalJobOptions& options_;
  std::unique_ptr<TcpStoreServer> store_;
  std::vector<Rank> ranks_;
  std::vector<Stream> streams_;
  pid_t group_ = 0;
  Clock::time_point started_{};
  std::string captured_;
  std::map<std::string, int> first_printer_;  // normalised stderr line -> the rank that printed it
  OomWatch oom_;                              // before any rank starts
};

}  // namespace

LocalJobResult run_local_job(const LocalJobOptions& options) { return Job(options).run(); }

int default_local_ranks() {
  const unsigned cores = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp(cores == 0 ? 2u : cores, 2u, 4u));
}

}  // namespace rdmx::cli

namespace rdmx::cli {

bool run_self_as_local_ranks(int ranks, const std::string& name) {
  if (launcher_present()) return false;
  LocalJobOptions options;
  options.ranks = ranks;
  options.name = name;
  options.output = OutputMode::Rank0Plain;
  options.command.push_back(self_executable());
  const auto& args = invocation_args();
  options.command.insert(options.command.end(), args.begin(), args.end());
  const LocalJobResult result = run_local_job(options);
  if (result.exit_code != 0) throw ExitStatus{result.exit_code};
  return true;
}

}  // namespace rdmx::cli
