// SPDX-License-Identifier: MIT
#include "run_cli.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "support/deny_syscall.hpp"

extern char** environ;

namespace rdmx::test {

const char* cli_path() { return RDMX_CLI_PATH; }
std::string example_path(const std::string& name) { return std::string(RDMX_EXAMPLES_DIR) + "/" + name; }
std::string source_path(const std::string& relative) { return std::string(RDMX_SOURCE_DIR) + "/" + relative; }

std::string write_temp_file(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

CliResult run_cli(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                  std::chrono::seconds limit, long denied_syscall) {
  std::vector<std::string> argv{cli_path()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_program(argv, env, limit, denied_syscall);
}

CliResult run_program(const std::vector<std::string>& argv_text, const std::map<std::string, std::string>& env,
                      std::chrono::seconds limit, long denied_syscall) {
  int out_pipe[2];
  int err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("pipe2: ") + std::strerror(errno));
  }
  // The child's environment: ours, edited, built before fork.
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr) merged[std::string(*e, static_cast<std::size_t>(eq - *e))] = eq + 1;
  }
  for (const auto& [key, value] : env) {
    if (value.empty())
      merged.erase(key);
    else
      merged[key] = value;
  }
  std::vector<std::string> env_text;
  for (const auto& [key, value] : merged) env_text.push_back(key + "=" + value);
  std::vector<char*> envp;
  for (auto& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv_text;
  std::vector<char*> argv;
  for (auto& a : argv_copy) argv.push_back(a.data());
  argv.push_back(nullptr);

  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    ::setpgid(0, 0);  // its own group, so a timeout kills the ranks it started too
    if (denied_syscall >= 0 && !deny_syscall(denied_syscall)) ::_exit(126);
    ::execve(argv[0], argv.data(), envp.data());
    std::fprintf(stderr, "execve %s: %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  CliResult result;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  bool killed = false;
  while (open_fds > 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(-pid, SIGKILL);
      killed = true;
      break;
    }
    if (::poll(fds, 2, static_cast<int>(std::min<long>(left.count(), 1000))) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[4096];
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
      if (n > 0) {
        sinks[i]->append(buffer, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& fd : fds) {
    if (fd.fd >= 0) ::close(fd.fd);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (killed) ::kill(-pid, SIGKILL);  // anything the group left behind
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (killed) result.err += "\n[run_cli: killed after " + std::to_string(limit.count()) + " s]\n";
  return result;
}

}  // namespace rdmx::test
