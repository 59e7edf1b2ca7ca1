// SPDX-License-Identifier: MIT
// A storm of silent connections against a rank's QP port does not keep its
// real peer out. Rank 1 opens 1500 raw TCP connections to rank 0's
// listener and says nothing on them (more than the 1024 connections a
// device keeps waiting for their HELLO), then connects its QP as usual:
// the QP carries a WRITE within RDMX_TIMEOUT, and rank 0 logs the
// connections it refused at a bounded rate, not one line each.
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "providers/tcp/address.hpp"
#include "support/harness.hpp"
#include "support/text.hpp"
#include "support/verbs_util.hpp"
#include "tcp/peers.hpp"

namespace rdmx::test {
namespace {

using namespace std::chrono_literals;

constexpr int kPeer = 1;
constexpr int kStorm = 1500;

// Non-blocking connections to `to` that never send a byte; returns how
// many the kernel completed within 5 s (the rest wait in SYN retries).
std::size_t open_silent_connections(const tcp::TcpAddress& to, std::vector<int>& fds) {
  for (int i = 0; i < kStorm; ++i) {
    const int fd = ::socket(to.socket.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0) << "socket " << i << ": " << std::strerror(errno);
    const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&to.socket), to.socket_len);
    CHECK(rc == 0 || errno == EINPROGRESS)
        << "connect " << i << " to " << to.to_string() << ": " << std::strerror(errno);
    fds.push_back(fd);
  }
  std::vector<char> done(fds.size(), 0);
  std::size_t connected = 0;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (connected < fds.size() && std::chrono::steady_clock::now() < deadline) {
    std::vector<pollfd> waiting;
    std::vector<std::size_t> index;
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (done[i]) continue;
      waiting.push_back({fds[i], POLLOUT, 0});
      index.push_back(i);
    }
    if (::poll(waiting.data(), waiting.size(), 100) <= 0) continue;
    for (std::size_t k = 0; k < waiting.size(); ++k) {
      if (waiting[k].revents == 0) continue;
      done[index[k]] = 1;
      int error = 0;
      socklen_t length = sizeof(error);
      ::getsockopt(waiting[k].fd, SOL_SOCKET, SO_ERROR, &error, &length);
      if (error == 0 && (waiting[k].revents & POLLOUT) != 0) ++connected;
    }
  }
  return connected;
}

class TcpConnectionStorm : public ::testing::TestWithParam<Placement> {
 protected:
  static void TearDownTestSuite() { NetNsPair::destroy(); }
};

TEST_P(TcpConnectionStorm, TheRealPeerGetsInPastSilentConnections) {
  ASSERT_TRUE(run_ranks(
      2, GetParam(),
      [](RankEnv& env) {
        ::setenv("RDMX_AUTH_KEY", kSecret, 1);
        ::setenv("RDMX_TIMEOUT", "10", 1);
        const std::string log = env.dir() + "/victim.log";
        if (env.rank() == kVictim) log_to_file(log);  // the victim's log, to count its lines
        Node node(env);
        Buffer buf(4096);
        auto mr = node.pd->register_memory(buf.data(), buf.size(), Access::LocalWrite | Access::RemoteWrite);
        if (env.rank() == kVictim) {
          std::memset(buf.data(), 0, buf.size());
          publish_region(env, "victim", *mr);
          auto qp = make_qp(node);
          env.store().set("victim-qp", std::string_view(qp->local_address().to_hex()));
          const auto start = std::chrono::steady_clock::now();
          connect_qp(env, *qp, kPeer, "real");
          await(env, "written");
          CHECK_EQ(buf.load64(0), 0x5707'4d00'0000'0001ull) << "the real peer's WRITE";
          const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          std::fflush(stderr);
          const std::string text = read_file(log);
          const std::size_t lines = occurrences(text, "refused a connection");
          CHECK_LE(lines, static_cast<std::size_t>(5 * (seconds + 2)))
              << lines << " refusals logged in " << seconds << " s: the log must be rate-limited\n"
              << text;
          env.barrier("checked");
        } else {
          rlimit lim{};
          ::getrlimit(RLIMIT_NOFILE, &lim);
          lim.rlim_cur = lim.rlim_max;
          ::setrlimit(RLIMIT_NOFILE, &lim);
          CHECK_GE(lim.rlim_cur, static_cast<rlim_t>(kStorm + 256)) << "ulimit -Hn is too low for the storm";
          const tcp::TcpAddress victim =
              tcp::TcpAddress::decode(QpAddress::from_hex(env.store().get_string("victim-qp")));
          std::vector<int> silent;
          const std::size_t connected = open_silent_connections(victim, silent);
          std::fprintf(stderr, "[rank 1] %zu of %d silent connections established\n", connected, kStorm);
          CHECK_GE(connected, 1024u) << "the storm must fill the victim's table of waiting connections";
          const RemoteRegion region = fetch_region(env, "victim");
          auto qp = make_qp(node);
          const auto start = std::chrono::steady_clock::now();
          connect_qp(env, *qp, kVictim, "real");
          buf.store64(0, 0x5707'4d00'0000'0001ull);
          Sge sge = mr->sge(0, 8);
          CHECK_WC(RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, sge, region.addr, region.rkey, 1),
                   "the real peer's WRITE through the storm", .wr_id = 1);
          std::fprintf(stderr, "[rank 1] the real QP got in after %.2f s\n",
                       std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
          signal(env, "written");
          env.barrier("checked");
          for (int fd : silent) ::close(fd);
        }
      },
      {.timeout = 120s}));
}

INSTANTIATE_TEST_SUITE_P(Placements, TcpConnectionStorm, ::testing::Values(Placement::Local, Placement::NetNsIPv4),
                         [](const ::testing::TestParamInfo<Placement>& p) { return std::string(to_string(p.param)); });

}  // namespace
}  // namespace rdmx::test
