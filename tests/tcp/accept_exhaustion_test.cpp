// SPDX-License-Identifier: MIT
// A rank out of file descriptors cannot accept its peers' QP connections.
// The engine must not spin on a listener that stays readable (nor log a
// warning per turn): it warns once, rests the listener, and accepts the
// waiting connection as soon as descriptors are free again.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "providers/tcp/address.hpp"
#include "support/harness.hpp"
#include "support/text.hpp"
#include "support/verbs_util.hpp"

namespace rdmx::test {
namespace {

using namespace std::chrono_literals;

// The whole file behind `fd` (opened before descriptors ran out: none is left to open it then).
std::string read_text(int fd) {
  std::string text;
  char buffer[4096];
  for (ssize_t n; (n = ::pread(fd, buffer, sizeof(buffer), static_cast<off_t>(text.size()))) > 0;) {
    text.append(buffer, static_cast<std::size_t>(n));
  }
  return text;
}

double cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

TEST(TcpListener, OutOfDescriptorsRestsTheListenerThenAccepts) {
  ASSERT_TRUE(run_ranks(1, Placement::Local, [](RankEnv& env) {
    // With a secret, the listener's first bytes on a connection are its
    // challenge: the client sees when it was accepted.
    ::setenv("RDMX_AUTH_KEY", "0123456789abcdef0123456789abcdef", 1);
    const std::string log_path = env.dir() + "/rank.log";
    const int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CHECK(log_fd >= 0);
    ::dup2(log_fd, 2);
    const int log = ::open(log_path.c_str(), O_RDONLY | O_CLOEXEC);
    Node node(env);
    auto qp = make_qp(node);
    const tcp::TcpAddress address = tcp::TcpAddress::decode(qp->local_address());
    const int client = ::socket(address.socket.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(client >= 0);

    // Every descriptor taken (the soft limit lowered first, so this is quick).
    rlimit limit{};
    ::getrlimit(RLIMIT_NOFILE, &limit);
    const rlimit saved = limit;
    limit.rlim_cur = 512;
    CHECK_EQ(::setrlimit(RLIMIT_NOFILE, &limit), 0);
    std::vector<int> hoard;
    for (int fd; hoard.size() < 1024 && (fd = ::dup(client)) >= 0;) hoard.push_back(fd);
    CHECK_EQ(errno, EMFILE);

    // The kernel completes the connection into the backlog; the engine cannot take it.
    const socklen_t length = address.socket.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    CHECK_EQ(::connect(client, reinterpret_cast<const sockaddr*>(&address.socket), length), 0) << std::strerror(errno);
    CHECK(eventually([&] { return read_text(log).find("cannot accept connections") != std::string::npos; }, 10s))
        << "no warning that the listener is out of descriptors:\n"
        << read_text(log);
    // While it waits, the engine rests: a spinning one would burn the whole window.
    const double cpu_before = cpu_seconds();
    ::poll(nullptr, 0, 500);
    const double cpu_used = cpu_seconds() - cpu_before;
    CHECK_LT(cpu_used, 0.25) << "the process used " << cpu_used << " s of CPU in 0.5 s while it could not accept";
    CHECK_EQ(occurrences(read_text(log), "cannot accept connections"), 1u) << read_text(log);

    // Descriptors free again: the waiting connection is accepted (its challenge arrives).
    for (int fd : hoard) ::close(fd);
    ::setrlimit(RLIMIT_NOFILE, &saved);
    pollfd pfd{.fd = client, .events = POLLIN, .revents = 0};
    CHECK_EQ(::poll(&pfd, 1, 10'000), 1) << "the connection was not accepted once descriptors were free";
    char byte = 0;
    CHECK_EQ(::recv(client, &byte, 1, 0), 1) << "the listener closed the connection instead of challenging it";
    ::close(client);
  }));
}

}  // namespace
}  // namespace rdmx::test
