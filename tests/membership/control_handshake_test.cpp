// SPDX-License-Identifier: MIT
// The control mesh's handshakes on real loopback sockets, both ends driven
// from one thread: poll() says when bytes have arrived, and a test waits
// past the answer window only to play a rank whose thread ran late.
#include "membership/control_handshake.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <gtest/gtest.h>

#include <thread>

namespace rdmx::membership {
namespace {

using namespace std::chrono_literals;

struct Listener {
  bootstrap::UniqueFd fd;
  int port = 0;
};

Listener listen_on_loopback() {
  Listener l;
  l.fd.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (!l.fd || ::bind(l.fd.get(), reinterpret_cast<sockaddr*>(&address), length) != 0 || ::listen(l.fd.get(), 8) != 0 ||
      ::getsockname(l.fd.get(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    ADD_FAILURE() << "cannot listen on loopback";
    return l;
  }
  l.port = ntohs(address.sin_port);
  return l;
}

// Whether any of `fds` becomes readable within 10 s.
bool readable(const std::vector<int>& fds) {
  std::vector<pollfd> watch;
  for (int fd : fds) watch.push_back({fd, POLLIN, 0});
  return ::poll(watch.data(), watch.size(), 10000) > 0;
}

const ControlHandshakes::Admit kAcceptAll = [](int, std::string&) { return ControlHandshakes::Admission::Accept; };

TEST(ControlHandshakeTest, AHelloThatCameInTimeIsTakenWhenProgressRunsLate) {
  constexpr auto kWindow = 200ms;
  Listener zero_listener = listen_on_loopback();
  Listener one_listener = listen_on_loopback();
  ControlHandshakes zero(0, 2, 7, zero_listener.fd.get(), kWindow);
  ControlHandshakes one(1, 2, 7, one_listener.fd.get(), 10s);
  ASSERT_EQ(one.dial(0, "127.0.0.1\n" + std::to_string(zero_listener.port)), "");

  ASSERT_TRUE(readable({zero_listener.fd.get()}));
  const auto accepted_at = core::Clock::now();
  EXPECT_TRUE(zero.progress(kAcceptAll).empty());
  ASSERT_EQ(zero.fds().size(), 2u) << "rank 0 should be answering one connection";

  ASSERT_TRUE(readable(one.fds()));
  EXPECT_TRUE(one.progress(kAcceptAll).empty()) << "the hello is sent, the answer not yet come";

  // The hello is on rank 0's socket; rank 0's thread comes back only after
  // its answer window has passed.
  ASSERT_TRUE(readable(zero.fds()));
  std::this_thread::sleep_until(accepted_at + kWindow + 50ms);
  auto taken = zero.progress(kAcceptAll);
  ASSERT_EQ(taken.size(), 1u) << "a hello that arrived in time was dropped";
  EXPECT_EQ(taken[0].peer, 1);
  EXPECT_TRUE(taken[0].fd) << taken[0].problem;

  ASSERT_TRUE(readable(one.fds()));
  auto made = one.progress(kAcceptAll);
  ASSERT_EQ(made.size(), 1u);
  EXPECT_EQ(made[0].peer, 0);
  EXPECT_TRUE(made[0].fd) << made[0].problem;
}

TEST(ControlHandshakeTest, AConnectionThatNeverSaysHelloIsDroppedAfterTheWindow) {
  constexpr auto kWindow = 100ms;
  Listener listener = listen_on_loopback();
  ControlHandshakes zero(0, 2, 7, listener.fd.get(), kWindow);
  bootstrap::UniqueFd silent(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<std::uint16_t>(listener.port));
  ASSERT_EQ(::connect(silent.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);

  ASSERT_TRUE(readable({listener.fd.get()}));
  const auto accepted_at = core::Clock::now();
  EXPECT_TRUE(zero.progress(kAcceptAll).empty());
  ASSERT_EQ(zero.fds().size(), 2u);
  std::uint8_t challenge[core::auth::kChallengeBytes];
  ASSERT_EQ(::recv(silent.get(), challenge, sizeof(challenge), MSG_WAITALL), static_cast<ssize_t>(sizeof(challenge)));

  EXPECT_TRUE(zero.progress(kAcceptAll).empty());
  if (core::Clock::now() < accepted_at + kWindow) {
    EXPECT_EQ(zero.fds().size(), 2u) << "dropped before its window ended";
  }
  std::this_thread::sleep_until(accepted_at + kWindow + 20ms);
  EXPECT_TRUE(zero.progress(kAcceptAll).empty());
  EXPECT_EQ(zero.fds().size(), 1u) << "a connection without a hello is still held after its window";
  std::uint8_t byte = 0;
  EXPECT_EQ(::recv(silent.get(), &byte, 1, 0), 0) << "rank 0 should have closed it";
}

}  // namespace
}  // namespace rdmx::membership
