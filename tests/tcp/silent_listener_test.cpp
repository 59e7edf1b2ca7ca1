// SPDX-License-Identifier: MIT
// A tcp QP whose listener never speaks connects again. A connection that a
// full accept queue dropped after the handshake looks exactly like this to
// the initiator: connected, and the CHALLENGE never comes. Before, the
// initiator waited for it until RDMX_TIMEOUT and the QP failed.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "providers/tcp/address.hpp"
#include "support/harness.hpp"
#include "support/verbs_util.hpp"

namespace rdmx::test {
namespace {

TEST(TcpConnect, AListenerThatNeverAnswersIsConnectedToAgain) {
  ASSERT_TRUE(run_ranks(1, Placement::Local, [](RankEnv&) {
    const int listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(listen_fd >= 0) << std::strerror(errno);
    tcp::TcpAddress silent;
    auto* in = reinterpret_cast<sockaddr_in*>(&silent.socket);
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    silent.socket_len = sizeof(sockaddr_in);
    CHECK_EQ(::bind(listen_fd, reinterpret_cast<sockaddr*>(&silent.socket), silent.socket_len), 0);
    CHECK_EQ(::listen(listen_fd, 16), 0);
    CHECK_EQ(::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&silent.socket), &silent.socket_len), 0);
    silent.qpn = 1;
    silent.nonce = ~std::uint64_t{0};  // the highest: the QP connecting to it initiates

    auto device = open_device("tcp");
    auto pd = device->alloc_pd();
    auto cq = device->create_cq(16);
    auto qp = make_qp(*device, *pd, *cq, *cq);
    CHECK(tcp::TcpAddress::decode(qp->local_address()).nonce < silent.nonce);
    qp->connect(silent.encode(), {.peer_rank = 0});

    // Accept whatever comes and say nothing; count the connections.
    std::vector<int> accepted;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (accepted.size() < 2 && std::chrono::steady_clock::now() < give_up) {
      pollfd pfd{listen_fd, POLLIN, 0};
      if (::poll(&pfd, 1, 100) == 1) {
        const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) accepted.push_back(fd);
      }
    }
    CHECK_GE(accepted.size(), 2u) << "the QP connected once to a listener that never answered and did not try again";
    CHECK(qp->state() != QpState::Error) << "the QP failed: " << qp->error_reason();
    for (int fd : accepted) ::close(fd);
    ::close(listen_fd);
  }));
}

}  // namespace
}  // namespace rdmx::test
