// SPDX-License-Identifier: MIT
// The failure detector and the agreement on real processes: forked ranks,
// real sockets, SIGKILL and SIGSTOP, a link taken down between network
// namespaces. Every survivor must reach the same verdict, soon after the
// failure, and a side that cannot be sure it is the larger must refuse.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "membership/membership.hpp"
#include "rdmx/error.hpp"
#include "support/harness.hpp"

namespace rdmx::membership {
namespace {

using namespace std::chrono_literals;
using test::Placement;
using test::RankEnv;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// The failure handler's record: which peers it heard of, and whether
// they fell silent rather than closed.
struct Heard {
  std::atomic<std::uint64_t> closed{0};
  std::atomic<std::uint64_t> silent{0};
  Membership::FailureHandler handler() {
    return [this](int peer, bool timed_out, const std::string&) {
      (timed_out ? silent : closed).fetch_or(std::uint64_t{1} << peer);
    };
  }
};

// Waits (bounded) until the detector has heard of every rank in `mask`: an
// application agrees after an error told it of a failure, not before.
bool heard_of(const Heard& heard, std::uint64_t mask, std::chrono::milliseconds within) {
  const auto end = Clock::now() + within;
  while (((heard.closed.load() | heard.silent.load()) & mask) != mask) {
    if (Clock::now() > end) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

std::string verdict_text(const Verdict& v) {
  return std::string(to_string(v.outcome)) + " failed={" + v.failed.to_string() + "} why: " + v.why;
}

void publish_pid(RankEnv& env, const std::string& tag) {
  env.store().set(tag + "/pid/" + std::to_string(env.rank()), std::to_string(::getpid()));
}
pid_t pid_of(RankEnv& env, const std::string& tag, int rank) {
  return static_cast<pid_t>(std::stol(env.store().get_string(tag + "/pid/" + std::to_string(rank))));
}

// A rank that leaves closes its connections, and one another rank still
// dials looks dead to it: each survivor waits here until all of them
// (every rank of `size` but `dead`) arrived under `key`.
void survivors_meet(RankEnv& env, const std::string& key, int size, int dead) {
  env.store().set(key + "/" + std::to_string(env.rank()), std::string_view("1"));
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) {
    if (r != dead) keys.push_back(key + "/" + std::to_string(r));
  }
  env.store().wait(keys);
}

TEST(MembershipTest, AKilledRankIsAgreedByEverySurvivorWithinASecond) {
  ASSERT_TRUE(test::run_ranks(
      4, Placement::Local,
      [](RankEnv& env) {
        Heard heard;
        Membership members(env.store_ptr(), "kill1", env.rank(), 4, 20s, heard.handler());
        env.barrier("ready");
        const auto start = Clock::now();
        if (env.rank() == 2) env.kill_self();
        CHECK(heard_of(heard, 4u, 5s));
        const Verdict v = members.agree(1, Clock::now() + 10s);
        CHECK(v.outcome == Verdict::Outcome::Go) << verdict_text(v);
        CHECK_EQ(v.failed.to_string(), std::string("2")) << verdict_text(v);
        CHECK_EQ(v.survivors, (std::vector<int>{0, 1, 3}));
        CHECK(v.why.find("closed without a goodbye") != std::string::npos || v.why.find("reports") != std::string::npos)
            << v.why;
        CHECK_LT(seconds_since(start), 1.0) << verdict_text(v);
        CHECK_EQ(heard.closed.load() & 4u, 4u) << "the handler heard of rank 2";
        CHECK_EQ(heard.silent.load(), 0u);
      },
      {.timeout = 60s, .may_be_killed = {2}}));
}

TEST(MembershipTest, AStoppedRankIsAgreedAtTheTimeoutAndFindsItselfOutWhenItResumes) {
  ASSERT_TRUE(test::run_ranks(
      4, Placement::Local,
      [](RankEnv& env) {
        Heard heard;
        const auto timeout = 1500ms;
        Membership members(env.store_ptr(), "stop1", env.rank(), 4, timeout, heard.handler());
        publish_pid(env, "stop1");
        env.barrier("ready");
        if (env.rank() == 3) {
          ::raise(SIGSTOP);
          // Resumed after the others decided: every connection is gone.
          const Verdict v = members.agree(1, Clock::now() + 10s);
          CHECK(v.outcome == Verdict::Outcome::Minority || v.outcome == Verdict::Outcome::Excluded) << verdict_text(v);
          env.store().set("stop1/resumed-verdict", std::string_view(to_string(v.outcome)));
          return;
        }
        const auto start = Clock::now();
        CHECK(heard_of(heard, 8u, 5s));
        const Verdict v = members.agree(1, Clock::now() + 10s);
        const double took = seconds_since(start);
        CHECK(v.outcome == Verdict::Outcome::Go) << verdict_text(v);
        CHECK_EQ(v.failed.to_string(), std::string("3")) << verdict_text(v);
        CHECK(v.why.find("sent nothing") != std::string::npos || v.why.find("reports") != std::string::npos) << v.why;
        CHECK_GT(took, 1.0) << "suspected before the timeout: " << verdict_text(v);
        CHECK_LT(took, 2.5) << verdict_text(v);
        env.store().set("stop1/decided/" + std::to_string(env.rank()), std::string_view("1"));
        if (env.rank() == 0) {
          env.store().wait({"stop1/decided/1", "stop1/decided/2"});
          ::kill(pid_of(env, "stop1", 3), SIGCONT);
          const std::string resumed = env.store().get_string("stop1/resumed-verdict");
          CHECK(resumed == "minority" || resumed == "excluded") << resumed;
        }
      },
      {.timeout = 60s}));
}

TEST(MembershipTest, TwoDeathsAndAThirdDuringTheAgreementEndInOneVerdict) {
  ASSERT_TRUE(test::run_ranks(
      7, Placement::Local,
      [](RankEnv& env) {
        // Rank 5 dies the moment it hears of the first failure: while the
        // agreement that failure started is under way.
        Membership::FailureHandler die_on_news = [](int, bool, const std::string&) { ::kill(::getpid(), SIGKILL); };
        Heard heard;
        Membership members(env.store_ptr(), "three", env.rank(), 7, 20s,
                           env.rank() == 5 ? die_on_news : heard.handler());
        env.barrier("ready");
        const auto start = Clock::now();
        if (env.rank() == 1 || env.rank() == 4) env.kill_self();
        if (env.rank() == 5) {
          // Waits for the news that kills it; bounded, in case it never comes.
          for (int i = 0; i < 1000; ++i) std::this_thread::sleep_for(10ms);
          FAIL_RANK() << "rank 5 outlived the news of a failure";
        }
        CHECK(heard_of(heard, 2u | 16u | 32u, 5s));
        // However the deaths fell across agreements, each rank agrees again
        // until a decision holds all three, and every survivor sees the
        // same decisions.
        std::string decisions;
        Verdict v;
        for (std::uint32_t epoch = 1; epoch <= 3; ++epoch) {
          v = members.agree(epoch, Clock::now() + 10s);
          CHECK(v.outcome == Verdict::Outcome::Go) << verdict_text(v);
          decisions += "{" + v.failed.to_string() + "}";
          if (v.failed.contains(1) && v.failed.contains(4) && v.failed.contains(5)) break;
        }
        CHECK_EQ(v.failed.to_string(), std::string("1, 4, 5")) << decisions;
        CHECK_LT(seconds_since(start), 2.0) << decisions;
        env.store().set("three/decisions/" + std::to_string(env.rank()), std::string_view(decisions));
        for (int r : {0, 2, 3, 6}) {
          CHECK_EQ(env.store().get_string("three/decisions/" + std::to_string(r)), decisions)
              << "rank " << r << " decided otherwise";
        }
      },
      {.timeout = 60s, .may_be_killed = {1, 4, 5}}));
}

TEST(MembershipTest, ARankThatClosesInGoodOrderIsNoFailure) {
  ASSERT_TRUE(test::run_ranks(
      3, Placement::Local,
      [](RankEnv& env) {
        Heard heard;
        auto members = std::make_unique<Membership>(env.store_ptr(), "bye", env.rank(), 3, 20s, heard.handler());
        env.barrier("ready");
        if (env.rank() == 2) {
          members.reset();
          env.store().set("bye/gone", std::string_view("1"));
          return;
        }
        env.store().get_string("bye/gone");
        const Verdict v = members->agree(1, Clock::now() + 10s);
        CHECK(v.outcome == Verdict::Outcome::Go) << verdict_text(v);
        CHECK_EQ(v.failed.to_string(), std::string("2")) << verdict_text(v);
        CHECK(v.why.find("closed its communicator") != std::string::npos) << v.why;
        CHECK_EQ(heard.closed.load() | heard.silent.load(), 0u) << "a goodbye was reported as a failure";
      },
      {.timeout = 60s}));
}

TEST(MembershipTest, HalfTheGroupGoesOnOnlyWhenTheStoreBreaksTheTie) {
  ASSERT_TRUE(test::run_ranks(4, Placement::Local,
                              [](RankEnv& env) {
                                Heard heard;
                                Membership members(env.store_ptr(), "tie", env.rank(), 4, 20s, heard.handler());
                                env.barrier("ready");
                                if (env.rank() >= 2) env.kill_self();
                                CHECK(heard_of(heard, 12u, 5s));
                                Verdict v = members.agree(1, Clock::now() + 10s);
                                if (v.failed.count() == 1) v = members.agree(2, Clock::now() + 10s);
                                // The dead cannot write to the store: both survivors write the same
                                // decision, and both win.
                                CHECK(v.outcome == Verdict::Outcome::Go) << verdict_text(v);
                                CHECK_EQ(v.survivors, (std::vector<int>{0, 1}));
                              },
                              {.timeout = 60s, .may_be_killed = {2, 3}}));
}

// Rank 0 alone in one network namespace, ranks 1-3 in the other: taking
// the link down cuts the group 1 against 3. The three go on; rank 0, which
// cannot tell a cut from three deaths, refuses.
TEST(MembershipTest, NetNsCutLinkLeavesTheMajorityGoingOnAndTheMinorityRefusing) {
  ASSERT_TRUE(test::run_ranks(4, Placement::NetNsIPv4,
                              [](RankEnv& env) {
                                const auto timeout = 1500ms;
                                Heard heard;
                                Membership members(env.store_ptr(), "cut", env.rank(), 4, timeout, heard.handler());
                                env.barrier("ready");
                                const std::string link = "ip link set dev " + env.ifname();
                                if (env.rank() == 0) {
                                  CHECK_EQ(std::system((link + " down").c_str()), 0);
                                }
                                CHECK(heard_of(heard, env.rank() == 0 ? 14u : 1u, 5s));
                                const Verdict v = members.agree(1, Clock::now() + 10s);
                                if (env.rank() == 0) {
                                  CHECK_EQ(std::system((link + " up").c_str()), 0);
                                  CHECK(v.outcome == Verdict::Outcome::Minority) << verdict_text(v);
                                  CHECK(v.why.find("1 of 4") != std::string::npos) << v.why;
                                } else {
                                  CHECK(v.outcome == Verdict::Outcome::Go) << verdict_text(v);
                                  CHECK_EQ(v.failed.to_string(), std::string("0")) << verdict_text(v);
                                }
                              },
                              {.timeout = 60s}));
}

// Twelve ranks connect only to their overlay neighbours (six each); when
// rank 5 dies, only its neighbours see its connection close, and the
// agreement they start reaches every survivor over connections made for it.
TEST(MembershipTest, TheMeshIsTheOverlayAndAnAgreementConnectsTheRest) {
  ASSERT_TRUE(test::run_ranks(
      12, Placement::Local,
      [](RankEnv& env) {
        Heard heard;
        Membership members(env.store_ptr(), "sparse", env.rank(), 12, 20s, heard.handler());
        CHECK_EQ(members.connections(), 6);
        env.barrier("ready");
        if (env.rank() == 5) env.kill_self();
        CHECK(heard_of(heard, 1u << 5, 5s));
        const Verdict v = members.agree(1, Clock::now() + 10s);
        CHECK(v.outcome == Verdict::Outcome::Go) << verdict_text(v);
        CHECK_EQ(v.failed.to_string(), std::string("5")) << verdict_text(v);
        CHECK(v.why.find("closed without a goodbye") != std::string::npos || v.why.find("reports") != std::string::npos)
            << v.why;
        // Each survivor sends its decision to every other, over a
        // connection made for it; a rank that adopted a decision may return
        // before its own went out, so this waits (bounded) for them.
        const auto until = Clock::now() + 5s;
        while (members.connections() < 10 && Clock::now() < until) std::this_thread::sleep_for(1ms);
        CHECK_EQ(members.connections(), 10) << "a survivor is not connected to every other";
        survivors_meet(env, "sparse/counted", 12, 5);
        CHECK_EQ(heard.silent.load(), 0u);
      },
      {.timeout = 60s, .may_be_killed = {5}}));
}

// A stopped rank outside most ranks' overlay: its neighbours find it silent
// at the timeout, and the ranks whose agreement dials it (the kernel takes
// the connection, the process never answers) learn of it from them.
TEST(MembershipTest, AStoppedRankBeyondTheOverlayIsAgreedAtTheTimeout) {
  ASSERT_TRUE(test::run_ranks(10, Placement::Local,
                              [](RankEnv& env) {
                                Heard heard;
                                Membership members(env.store_ptr(), "stop10", env.rank(), 10, 1500ms, heard.handler());
                                publish_pid(env, "stop10");
                                env.barrier("ready");
                                if (env.rank() == 4) {
                                  ::raise(SIGSTOP);
                                  return;
                                }
                                const auto start = Clock::now();
                                CHECK(heard_of(heard, 1u << 4, 5s));
                                const Verdict v = members.agree(1, Clock::now() + 10s);
                                CHECK(v.outcome == Verdict::Outcome::Go) << verdict_text(v);
                                CHECK_EQ(v.failed.to_string(), std::string("4")) << verdict_text(v);
                                CHECK_LT(seconds_since(start), 4.0) << verdict_text(v);
                                env.store().set("stop10/decided/" + std::to_string(env.rank()), std::string_view("1"));
                                if (env.rank() == 0) {
                                  std::vector<std::string> keys;
                                  for (int r : {1, 2, 3, 5, 6, 7, 8, 9})
                                    keys.push_back("stop10/decided/" + std::to_string(r));
                                  env.store().wait(keys);
                                  ::kill(pid_of(env, "stop10", 4), SIGCONT);
                                }
                              },
                              {.timeout = 60s}));
}

// The exchange a communicator is built with: over all twelve ranks, over a
// subset numbered anew (as a shrunk group is: its partners are not overlay
// neighbours), and one whose member dies, which fails naming it.
TEST(MembershipTest, GatherGivesEveryMemberEveryValueAndNamesAMemberThatDied) {
  ASSERT_TRUE(test::run_ranks(12, Placement::Local,
                              [](RankEnv& env) {
                                Membership members(env.store_ptr(), "gather", env.rank(), 12, 20s, nullptr);
                                std::vector<int> everyone(12);
                                for (int r = 0; r < 12; ++r) everyone[static_cast<std::size_t>(r)] = r;
                                const auto all =
                                    members.gather("gather/all", everyone, "v" + std::to_string(env.rank() * 7),
                                                   "test values", Clock::now() + 10s);
                                CHECK_EQ(all.size(), 12u);
                                for (int r = 0; r < 12; ++r)
                                  CHECK_EQ(all[static_cast<std::size_t>(r)], "v" + std::to_string(r * 7));

                                const std::vector<int> subset{11, 0, 7, 2, 5};
                                if (std::find(subset.begin(), subset.end(), env.rank()) != subset.end()) {
                                  const auto some = members.gather("gather/some", subset, std::string(env.rank(), 'x'),
                                                                   "test values", Clock::now() + 10s);
                                  CHECK_EQ(some.size(), subset.size());
                                  for (std::size_t i = 0; i < subset.size(); ++i)
                                    CHECK_EQ(some[i], std::string(subset[i], 'x'));
                                }
                                env.barrier("gathered");
                                if (env.rank() == 9) env.kill_self();
                                try {
                                  members.gather("gather/dead", everyone, "late", "test values", Clock::now() + 10s);
                                  FAIL_RANK() << "an exchange with a dead member finished";
                                } catch (const Error& e) {
                                  CHECK(e.code() == ErrorCode::PeerFailure) << e.what();
                                  CHECK(std::string(e.what()).find("rank 9") != std::string::npos) << e.what();
                                }
                                survivors_meet(env, "gather/caught", 12, 9);
                              },
                              {.timeout = 60s, .may_be_killed = {9}}));
}

TEST(MembershipTest, AgreeWithNoFailureKeepsEveryone) {
  ASSERT_TRUE(test::run_ranks(3, Placement::Local,
                              [](RankEnv& env) {
                                Heard heard;
                                Membership members(env.store_ptr(), "none", env.rank(), 3, 20s, heard.handler());
                                const Verdict v = members.agree(1, Clock::now() + 10s);
                                CHECK(v.outcome == Verdict::Outcome::Go) << verdict_text(v);
                                CHECK(v.failed.empty()) << verdict_text(v);
                                CHECK_EQ(heard.closed.load() | heard.silent.load(), 0u);
                                env.barrier("done");
                              },
                              {.timeout = 60s}));
}

}  // namespace
}  // namespace rdmx::membership
