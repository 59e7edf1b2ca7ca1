// SPDX-License-Identifier: MIT
// Helpers for bootstrap tests that run real processes.
//
// The test process stays single-threaded while it forks: servers and ranks
// run in children, which report through their exit status (and stderr).
// Every child arms alarm() so a hang kills it instead of the test run.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "rdmx/bootstrap.hpp"

namespace rdmx::test {

// Seconds after which a child kills itself (SIGALRM): longer than any
// expected step, shorter than the CTest timeout.
inline constexpr unsigned kChildAlarmSeconds = 60;

// Fails the child with a message naming the place.
#define CHILD_REQUIRE(cond)                                                             \
  do {                                                                                  \
    if (!(cond))                                                                        \
      throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                               ": requirement failed: " #cond);                         \
  } while (0)

// Runs `body` in a child process; the child exits with body's return value,
// or 100 if it threw (the exception text goes to stderr).
inline pid_t spawn(const std::function<int()>& body, unsigned alarm_seconds = kChildAlarmSeconds) {
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::alarm(alarm_seconds);
    int rc = 100;
    try {
      rc = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child %d failed: %s\n", static_cast<int>(::getpid()), e.what());
    } catch (...) {
      std::fprintf(stderr, "child %d failed with a non-standard exception\n", static_cast<int>(::getpid()));
    }
    std::fflush(stdout);
    std::fflush(stderr);
    ::_exit(rc);
  }
  return pid;
}

// Exit code of the child, or 128 + signal number if it was killed.
inline int wait_exit(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// A temporary directory removed with its contents at scope exit.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/rdmx-boot-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = pattern;
    owner_ = ::getpid();
  }
  ~TempDir() {
    if (::getpid() != owner_) return;  // a forked child must not delete the parent's directory
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  pid_t owner_;
};

// A pipe for one-way signalling between processes.
class Pipe {
 public:
  Pipe() {
    if (::pipe(fds_) != 0) throw std::runtime_error("pipe failed");
  }
  ~Pipe() {
    close_read();
    close_write();
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  int read_fd() const { return fds_[0]; }
  int write_fd() const { return fds_[1]; }
  void close_read() {
    if (fds_[0] >= 0) ::close(fds_[0]);
    fds_[0] = -1;
  }
  void close_write() {
    if (fds_[1] >= 0) ::close(fds_[1]);
    fds_[1] = -1;
  }
  void write_all(const void* data, std::size_t size) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      ssize_t n = ::write(fds_[1], p, size);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw std::runtime_error("pipe write failed");
      p += n;
      size -= static_cast<std::size_t>(n);
    }
  }
  // Reads exactly `size` bytes within `timeout`; false on EOF or timeout.
  bool read_exact(void* data, std::size_t size, std::chrono::milliseconds timeout) {
    char* p = static_cast<char*>(data);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (size > 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd pfd{.fd = fds_[0], .events = POLLIN, .revents = 0};
      int ready = ::poll(&pfd, 1, static_cast<int>(left.count()));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) return false;
      ssize_t n = ::read(fds_[0], p, size);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      p += n;
      size -= static_cast<std::size_t>(n);
    }
    return true;
  }

 private:
  int fds_[2] = {-1, -1};
};

// A TcpStoreServer running in a child process. It serves until stop()
// (which closes the pipe the child blocks on) or kill().
class ServerProcess {
 public:
  // `log_path`: where the server's stderr (its log) goes, when not the test's.
  explicit ServerProcess(const std::string& host = "127.0.0.1", std::uint16_t port = 0,
                         const std::string& log_path = "") {
    Pipe port_pipe;
    pid_ = spawn([&]() -> int {
      if (!log_path.empty()) {
        const int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (log_fd >= 0) ::dup2(log_fd, 2);
      }
      port_pipe.close_read();
      stop_pipe_.close_write();
      TcpStoreServer server(host, port);
      std::uint16_t bound = server.port();
      port_pipe.write_all(&bound, sizeof(bound));
      char byte;
      while (::read(stop_pipe_.read_fd(), &byte, 1) != 0) {
        if (errno != EINTR) break;
      }
      return 0;
    });
    port_pipe.close_write();
    stop_pipe_.close_read();
    if (!port_pipe.read_exact(&port_, sizeof(port_), std::chrono::seconds(20))) {
      kill();
      throw std::runtime_error("store server child did not report its port (see its stderr)");
    }
  }
  ~ServerProcess() {
    if (pid_ > 0) kill();
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  std::uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }
  // Orderly shutdown; returns the child's exit code.
  int stop() {
    stop_pipe_.close_write();
    int rc = wait_exit(pid_);
    pid_ = -1;
    return rc;
  }
  // SIGKILL, as a crash would; waits until the process is gone.
  void kill() {
    ::kill(pid_, SIGKILL);
    wait_exit(pid_);
    pid_ = -1;
  }

 private:
  Pipe stop_pipe_;
  pid_t pid_ = -1;
  std::uint16_t port_ = 0;
};

// A port that was free a moment ago (the kernel rarely reuses it at once).
inline std::uint16_t pick_free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    throw std::runtime_error("bind to pick a free port failed");
  }
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

}  // namespace rdmx::test
