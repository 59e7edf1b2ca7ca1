// SPDX-License-Identifier: MIT
// Tests of the multi-process harness itself (tests/support/harness.hpp). They
// need the file store but no provider.
#include "support/harness.hpp"

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>

namespace rdmx::test {
namespace {

using namespace std::chrono_literals;

std::string message_of(const ::testing::AssertionResult& r) { return r.message(); }

TEST(Harness, RanksExchangeThroughStore) {
  ASSERT_TRUE(run_ranks(4, Placement::Local, [](RankEnv& env) {
    CHECK_EQ(env.world_size(), 4);
    env.store().set("value/" + std::to_string(env.rank()), std::string_view(std::to_string(env.rank() * 10)));
    for (int r = 0; r < env.world_size(); ++r) {
      CHECK_EQ(env.store().get_string("value/" + std::to_string(r)), std::to_string(r * 10));
    }
    // add() is atomic across processes: every rank sees a distinct ticket.
    std::int64_t ticket = env.store().add("tickets", 1);
    env.store().set("ticket/" + std::to_string(ticket), std::string_view("taken"));
    env.barrier("after-tickets");
    for (int t = 1; t <= env.world_size(); ++t) {
      CHECK(env.store().check("ticket/" + std::to_string(t))) << t;
    }
    CHECK_EQ(std::string(std::getenv("RDMX_SOCKET_IFNAME")), "lo");
  }));
}

TEST(Harness, ChildCheckFailureIsReportedWithRankAndLine) {
  auto r = run_ranks(2, Placement::Local, [](RankEnv& env) {
    if (env.rank() == 1) {
      int answer = 41;
      CHECK_EQ(answer, 42) << "the answer";
    }
  });
  ASSERT_FALSE(r);
  std::string msg = message_of(r);
  EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("harness_test.cpp:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("CHECK(answer == 42) failed: 41 (0x29) vs 42 (0x2a). the answer"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("rank 0 ("), std::string::npos) << "rank 0 succeeded and must not be reported: " << msg;
}

TEST(Harness, ScopedTraceIsAddedToFailures) {
  auto r = run_ranks(1, Placement::Local, [](RankEnv&) {
    int step = 1;
    ScopedTrace outer([&] { return "outer step " + std::to_string(step); });
    {
      ScopedTrace gone([] { return std::string("must not appear"); });
    }
    step = 2;
    FAIL_RANK() << "failing";
  });
  ASSERT_FALSE(r);
  EXPECT_NE(message_of(r).find("while: outer step 2"), std::string::npos) << message_of(r);
  EXPECT_EQ(message_of(r).find("must not appear"), std::string::npos) << message_of(r);
}

TEST(Harness, ChildExceptionIsReported) {
  auto r = run_ranks(1, Placement::Local,
                     [](RankEnv&) { throw rdmx::Error(rdmx::ErrorCode::InvalidArgument, "boom from the child"); });
  ASSERT_FALSE(r);
  EXPECT_NE(message_of(r).find("boom from the child"), std::string::npos) << message_of(r);
  EXPECT_NE(message_of(r).find("invalid argument"), std::string::npos) << message_of(r);
}

TEST(Harness, CrashIsReportedWithSignal) {
  auto r = run_ranks(2, Placement::Local, [](RankEnv& env) {
    if (env.rank() == 0) std::abort();
  });
  ASSERT_FALSE(r);
  EXPECT_NE(message_of(r).find("rank 0"), std::string::npos) << message_of(r);
  EXPECT_NE(message_of(r).find("SIGABRT"), std::string::npos) << message_of(r);
}

TEST(Harness, HungRankIsKilledAndNamed) {
  Options options;
  options.timeout = 1500ms;
  auto start = std::chrono::steady_clock::now();
  auto r = run_ranks(
      3, Placement::Local,
      [](RankEnv& env) {
        if (env.rank() == 2) {
          for (;;) ::pause();
        }
      },
      options);
  auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r);
  std::string msg = message_of(r);
  EXPECT_NE(msg.find("rank 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("HUNG"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("rank 0 ("), std::string::npos) << msg;
  EXPECT_EQ(msg.find("rank 1 ("), std::string::npos) << msg;
  EXPECT_LT(elapsed, 10s);
}

TEST(Harness, FailureCutsOtherRanksShort) {
  Options options;
  options.timeout = 60s;
  options.failure_grace = 300ms;
  auto start = std::chrono::steady_clock::now();
  auto r = run_ranks(
      2, Placement::Local,
      [](RankEnv& env) {
        if (env.rank() == 0) FAIL_RANK() << "early failure";
        for (;;) ::pause();
      },
      options);
  auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r);
  std::string msg = message_of(r);
  EXPECT_NE(msg.find("early failure"), std::string::npos) << msg;
  EXPECT_NE(msg.find("after rank 0 failed"), std::string::npos) << msg;
  EXPECT_LT(elapsed, 10s);
}

TEST(Harness, DeliberateKillIsAcceptedOnlyWhenListed) {
  auto body = [](RankEnv& env) {
    if (env.rank() == 1) {
      env.store().set("about-to-die", std::string_view("1"));
      env.kill_self();
    }
    env.store().get_string("about-to-die");
  };
  Options listed;
  listed.may_be_killed = {1};
  EXPECT_TRUE(run_ranks(2, Placement::Local, body, listed));
  auto r = run_ranks(2, Placement::Local, body);
  ASSERT_FALSE(r);
  EXPECT_NE(message_of(r).find("SIGKILL"), std::string::npos) << message_of(r);
}

TEST(Harness, RefusesToForkFromAMultiThreadedParent) {
  std::promise<void> stop;
  std::thread t([f = stop.get_future()]() mutable { f.wait(); });
  auto r = run_ranks(1, Placement::Local, [](RankEnv&) {});
  stop.set_value();
  t.join();
  ASSERT_FALSE(r);
  EXPECT_NE(message_of(r).find("multi-threaded"), std::string::npos) << message_of(r);
}

// The namespaces: each rank sees its own veth, owns its address and reaches
// the other namespace's address over the veth (plain TCP, no provider).
class HarnessPlacement : public ::testing::TestWithParam<Placement> {
 protected:
  static void TearDownTestSuite() { NetNsPair::destroy(); }
};

TEST_P(HarnessPlacement, TcpAcrossPlacement) {
  ASSERT_TRUE(run_ranks(3, GetParam(), [](RankEnv& env) {
    const char* ifname = std::getenv("RDMX_SOCKET_IFNAME");
    CHECK(ifname != nullptr);
    CHECK_EQ(std::string(ifname), env.ifname());
    CHECK(::if_nametoindex(ifname) != 0) << "interface " << ifname << " is not visible in this rank's namespace";
    const bool v6 = env.placement() == Placement::NetNsIPv6;
    const char* family = std::getenv("RDMX_SOCKET_FAMILY");
    if (env.placement() == Placement::Local) {
      CHECK(family == nullptr);
    } else {
      CHECK(family != nullptr);
      CHECK_EQ(std::string(family), v6 ? "AF_INET6" : "AF_INET");
    }

    auto make_addr = [v6](const std::string& ip, std::uint16_t port, sockaddr_storage& ss) -> socklen_t {
      std::memset(&ss, 0, sizeof ss);
      if (v6) {
        auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
        a->sin6_family = AF_INET6;
        a->sin6_port = htons(port);
        CHECK_EQ(::inet_pton(AF_INET6, ip.c_str(), &a->sin6_addr), 1) << ip;
        return sizeof(sockaddr_in6);
      }
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      a->sin_family = AF_INET;
      a->sin_port = htons(port);
      CHECK_EQ(::inet_pton(AF_INET, ip.c_str(), &a->sin_addr), 1) << ip;
      return sizeof(sockaddr_in);
    };

    if (env.rank() == 0) {
      int ls = ::socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
      CHECK_GE(ls, 0) << std::strerror(errno);
      sockaddr_storage ss;
      socklen_t len = make_addr(env.ip(), 0, ss);
      CHECK_EQ(::bind(ls, reinterpret_cast<sockaddr*>(&ss), len), 0)
          << "bind " << env.ip() << ": " << std::strerror(errno);
      CHECK_EQ(::listen(ls, 8), 0);
      len = sizeof ss;
      CHECK_EQ(::getsockname(ls, reinterpret_cast<sockaddr*>(&ss), &len), 0);
      std::uint16_t port = v6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                              : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
      env.store().set("listen", std::string_view(env.ip() + " " + std::to_string(port)));
      for (int i = 1; i < env.world_size(); ++i) {
        int s = ::accept(ls, nullptr, nullptr);
        CHECK_GE(s, 0) << std::strerror(errno);
        char c = 0;
        CHECK_EQ(::recv(s, &c, 1, MSG_WAITALL), 1);
        c = static_cast<char>(c + 1);
        CHECK_EQ(::send(s, &c, 1, MSG_NOSIGNAL), 1);
        ::close(s);
      }
      ::close(ls);
    } else {
      std::string listen = env.store().get_string("listen");
      std::string ip = listen.substr(0, listen.find(' '));
      auto port = static_cast<std::uint16_t>(std::stoi(listen.substr(listen.find(' ') + 1)));
      if (env.placement() != Placement::Local) {
        // Rank 0's address belongs to the other namespace: it cannot be bound here.
        CHECK_NE(ip, env.ip());
        int probe = ::socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
        sockaddr_storage ss;
        socklen_t len = make_addr(ip, 0, ss);
        CHECK_NE(::bind(probe, reinterpret_cast<sockaddr*>(&ss), len), 0)
            << "rank 0's address " << ip << " is bindable in rank " << env.rank() << "'s namespace";
        ::close(probe);
      }
      int s = ::socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
      sockaddr_storage ss;
      socklen_t len = make_addr(ip, port, ss);
      CHECK_EQ(::connect(s, reinterpret_cast<sockaddr*>(&ss), len), 0)
          << "connect to " << ip << ":" << port << ": " << std::strerror(errno);
      char c = static_cast<char>(env.rank());
      CHECK_EQ(::send(s, &c, 1, MSG_NOSIGNAL), 1);
      CHECK_EQ(::recv(s, &c, 1, MSG_WAITALL), 1);
      CHECK_EQ(static_cast<int>(c), env.rank() + 1);
      ::close(s);
    }
  }));
}

INSTANTIATE_TEST_SUITE_P(Placements, HarnessPlacement,
                         ::testing::Values(Placement::Local, Placement::NetNsIPv4, Placement::NetNsIPv6),
                         [](const ::testing::TestParamInfo<Placement>& p) { return std::string(to_string(p.param)); });

}  // namespace
}  // namespace rdmx::test
