// SPDX-License-Identifier: MIT
// What goes wrong, and what every rank is told: mismatched calls, a rank
// that never arrives, a dead rank, abort, and bad arguments.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <functional>
#include <string>
#include <vector>

#include "coll/coll_support.hpp"
#include "support/text.hpp"

namespace rdmx::test {
namespace {

// Runs `call` expecting an rdmx::Error of `code`; returns its what().
template <class F>
std::string expect_error(ErrorCode code, F&& call, const std::string& what) {
  try {
    call();
  } catch (const Error& e) {
    CHECK_EQ(e.code(), code) << what << ": " << e.what();
    return e.what();
  } catch (const std::exception& e) {
    FAIL_RANK() << what << ": unexpected exception " << e.what();
  }
  fail_rank(__FILE__, __LINE__, what + ": no error");
}

// The ranks the error of `call` names as missing when some rank is
// stopped: the data path's timeout names them after "Missing: "; the
// failure detector's revocation, which may come first, in failed_ranks
// (and as "rank N" in the returned text). Returns that part, or fails.
template <class F>
std::string named_missing(F&& call, const std::string& what, std::string* whole = nullptr) {
  try {
    call();
  } catch (const Error& e) {
    const std::string text = e.what();
    if (whole != nullptr) *whole = text;
    if (e.code() == ErrorCode::PeerFailure && !e.context().failed_ranks.empty()) {
      CHECK(contains(text, "revoked")) << what << ": " << text;
      std::string named;
      for (int r : e.context().failed_ranks) named += (named.empty() ? "rank " : ", rank ") + std::to_string(r);
      return named;
    }
    CHECK_EQ(e.code(), ErrorCode::Timeout) << what << ": " << text;
    const std::size_t missing = text.find("Missing: ");
    const std::size_t not_missing = text.find("Not missing", missing);
    CHECK(missing != std::string::npos) << what << ": " << text;
    return text.substr(missing, not_missing == std::string::npos ? std::string::npos : not_missing - missing);
  } catch (const std::exception& e) {
    FAIL_RANK() << what << ": unexpected exception " << e.what();
  }
  fail_rank(__FILE__, __LINE__, what + ": no error");
}

class CollErrors : public ::testing::TestWithParam<std::string> {
 protected:
  static void TearDownTestSuite() { NetNsPair::destroy(); }
};

// Rank 1 calls all_gather where ranks 0 and 2 call all_reduce: all three
// fail with a message naming who called what, none hangs.
TEST_P(CollErrors, MismatchedOperationsNameTheRanksAndCalls) {
  ASSERT_TRUE(run_coll_ranks({GetParam(), 3}, [](RankEnv& env) {
    auto comm = make_comm(env, "mismatch");
    std::vector<float> in(64, 1.0f), out(64 * 3);
    comm->all_reduce(in.data(), out.data(), 64, DataType::Float32, ReduceOp::Sum);  // #1 agrees
    const std::string text = expect_error(
        ErrorCode::Protocol,
        [&] {
          if (env.rank() == 1) {
            comm->all_gather(in.data(), out.data(), 64, DataType::Float32);
          } else {
            comm->all_reduce(in.data(), out.data(), 64, DataType::Float32, ReduceOp::Sum);
          }
        },
        "mismatched collective #2");
    CHECK(contains(text, "all_gather #2")) << text;
    CHECK(contains(text, "all_reduce #2")) << text;
    CHECK(contains(text, "rank 1 called all_gather") || contains(text, "rank 1 called all_reduce") ||
          contains(text, "but rank 1 called all_gather"))
        << text;
    // The communicator is unusable afterwards, and says so.
    expect_error(
        ErrorCode::InvalidState, [&] { comm->barrier(); }, "barrier after the mismatch");
  }));
}

// Counts, types, roots and reductions are checked as well as the operation.
TEST_P(CollErrors, MismatchedArgumentsAreDetected) {
  struct Variant {
    const char* name;
    std::function<void(Communicator&, int, std::vector<std::int32_t>&)> call;
    const char* mine;
    const char* theirs;
  };
  const std::vector<Variant> variants = {
      {"count",
       [](Communicator& c, int r, std::vector<std::int32_t>& b) {
         c.all_reduce(b.data(), b.data(), r == 1 ? 8 : 16, DataType::Int32, ReduceOp::Sum);
       },
       "int32 x 16", "int32 x 8"},
      {"type",
       [](Communicator& c, int r, std::vector<std::int32_t>& b) {
         c.all_reduce(b.data(), b.data(), 16, r == 1 ? DataType::Uint32 : DataType::Int32, ReduceOp::Sum);
       },
       "int32 x 16", "uint32 x 16"},
      {"root",
       [](Communicator& c, int r, std::vector<std::int32_t>& b) {
         c.broadcast(b.data(), 16, DataType::Int32, r == 1 ? 1 : 0);
       },
       "root 0", "root 1"},
      {"reduction",
       [](Communicator& c, int r, std::vector<std::int32_t>& b) {
         c.all_reduce(b.data(), b.data(), 16, DataType::Int32, r == 1 ? ReduceOp::Max : ReduceOp::Sum);
       },
       "sum", "max"},
  };
  for (const auto& v : variants) {
    ASSERT_TRUE(run_coll_ranks({GetParam(), 2}, [&](RankEnv& env) {
      CommOptions options;
      options.provider = env.provider();
      options.tag = std::string("m-") + v.name;
      options.timeout = std::chrono::milliseconds(3000);  // both think they are root: found at the timeout at worst
      auto comm = Communicator::create(env.store_ptr(), env.rank(), env.world_size(), options);
      std::vector<std::int32_t> buf(16, 1);
      const std::string text = expect_error(
          ErrorCode::Protocol, [&] { v.call(*comm, env.rank(), buf); }, v.name);
      CHECK(contains(text, v.mine) && contains(text, v.theirs)) << v.name << ": " << text;
    })) << v.name;
  }
}

// Rank 2 never calls the collective: the others fail after the timeout,
// naming rank 2 and the sequence number, instead of hanging.
TEST_P(CollErrors, MissingRankTimesOutNamingIt) {
  ASSERT_TRUE(run_coll_ranks({GetParam(), 3}, [](RankEnv& env) {
    CommOptions options;
    options.provider = env.provider();
    options.tag = "late";
    options.timeout = std::chrono::milliseconds(1500);
    auto comm = Communicator::create(env.store_ptr(), env.rank(), env.world_size(), options);
    std::vector<double> buf(1000, 1.0);
    comm->all_reduce(buf.data(), buf.data(), buf.size(), DataType::Float64, ReduceOp::Sum);  // #1
    if (env.rank() == 2) {
      env.store().get("late/released", std::chrono::milliseconds(30'000));  // until the others have failed
      return;
    }
    const std::string text = expect_error(
        ErrorCode::Timeout,
        [&] { comm->all_reduce(buf.data(), buf.data(), buf.size(), DataType::Float64, ReduceOp::Sum); },
        "all_reduce #2 without rank 2");
    CHECK(contains(text, "all_reduce #2")) << text;
    CHECK(contains(text, "rank 2 has not called it")) << text;
    CHECK(contains(text, "#1")) << "the missing rank's last collective: " << text;
    // Rank 2 is released once both have failed.
    env.store().set("late/failed/" + std::to_string(env.rank()), std::string_view("1"));
    if (env.rank() == 0) {
      env.store().wait({"late/failed/0", "late/failed/1"}, std::chrono::milliseconds(30'000));
      env.store().set("late/released", std::string_view("1"));
    }
  }));
}

// A rank killed before the collective: the others get PeerFailure naming it
// long before the timeout.
TEST_P(CollErrors, DeadRankFailsTheOthersQuickly) {
  ASSERT_TRUE(run_coll_ranks(
      {GetParam(), 3},
      [](RankEnv& env) {
        auto comm = make_comm(env, "dead");
        std::vector<float> buf(4096, 1.0f);
        comm->all_reduce(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::Sum);
        env.barrier("before");
        if (env.rank() == 2) env.kill_self();
        const auto start = std::chrono::steady_clock::now();
        const std::string text = expect_error(
            ErrorCode::PeerFailure,
            [&] { comm->all_reduce(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::Sum); },
            "all_reduce after rank 2 died");
        CHECK(contains(text, "rank 2")) << text;
        CHECK_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << text;
      },
      std::chrono::milliseconds(120'000), {2}));
}

// Ranks whose calls differ so that they run different algorithms or roots
// wait for messages that never come: the watch's READs of the peers'
// progress find the mismatch long before the timeout, on every rank.
TEST_P(CollErrors, MismatchesAreFoundWithinASecondWhateverTheAlgorithms) {
  struct Variant {
    const char* name;
    std::function<void(Communicator&, int, std::vector<float>&)> call;
  };
  constexpr std::size_t kBig = std::size_t{1} << 20;  // ring all_reduce; small counts take rd
  const std::vector<Variant> variants = {
      {"count rd vs ring",
       [](Communicator& c, int r, std::vector<float>& b) {
         c.all_reduce(b.data(), b.data(), r == 1 ? 1000 : kBig, DataType::Float32, ReduceOp::Sum);
       }},
      {"broadcast roots",
       [](Communicator& c, int r, std::vector<float>& b) {
         c.broadcast(b.data(), 4096, DataType::Float32, r == 2 ? 3 : 0);
       }},
      {"reduce roots",
       [](Communicator& c, int r, std::vector<float>& b) {
         c.reduce(b.data(), b.data(), kBig / 4, DataType::Float32, ReduceOp::Sum, r == 0 ? 1 : 2);
       }},
      {"all_reduce vs all_gather",
       [](Communicator& c, int r, std::vector<float>& b) {
         if (r == 3) {
           c.all_gather(b.data(), b.data() + 65536, 65536, DataType::Float32);
         } else {
           c.all_reduce(b.data(), b.data(), 65536 * 4, DataType::Float32, ReduceOp::Sum);
         }
       }},
      {"barrier vs broadcast",
       [](Communicator& c, int r, std::vector<float>& b) {
         if (r == 1) {
           c.barrier();
         } else {
           c.broadcast(b.data(), 100000, DataType::Float32, 0);
         }
       }},
  };
  for (const auto& v : variants) {
    ASSERT_TRUE(run_coll_ranks({GetParam(), 4}, [&](RankEnv& env) {
      CommOptions options;
      options.provider = env.provider();
      options.tag = std::string("quick-") + v.name;
      options.timeout = std::chrono::milliseconds(20'000);
      auto comm = Communicator::create(env.store_ptr(), env.rank(), env.world_size(), options);
      std::vector<float> buf(kBig * 2, 1.0f);
      comm->barrier();
      const auto start = std::chrono::steady_clock::now();
      // A rank whose own part agreed with its peers' (rank 1 receives the
      // broadcast of root 0 from rank 0) may finish the mismatched call; it
      // then learns of the mismatch in its next one.
      const std::string text = expect_error(
          ErrorCode::Protocol,
          [&] {
            v.call(*comm, env.rank(), buf);
            comm->barrier();
          },
          v.name);
      const auto took = std::chrono::steady_clock::now() - start;
      CHECK(contains(text, "mismatched calls")) << v.name << ": " << text;
      CHECK_LT(took, std::chrono::seconds(5))
          << v.name << ": found only after " << std::chrono::duration<double>(took).count() << " s: " << text;
    })) << v.name;
  }
}

// A rank killed after a collective, while the others wait in the next one
// for data that only some of them expect from it: every survivor gets
// PeerFailure naming it, whichever provider noticed the death first.
TEST_P(CollErrors, DeadRankBetweenCollectivesFailsEverySurvivorQuickly) {
  ASSERT_TRUE(run_coll_ranks(
      {GetParam(), 4},
      [](RankEnv& env) {
        CommOptions options;
        options.provider = env.provider();
        options.tag = "dead4";
        options.timeout = std::chrono::milliseconds(20'000);
        auto comm = Communicator::create(env.store_ptr(), env.rank(), env.world_size(), options);
        std::vector<float> buf(std::size_t{1} << 18, 1.0f);
        comm->all_reduce(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::Sum);
        env.barrier("before");
        if (env.rank() == 2) env.kill_self();
        const auto start = std::chrono::steady_clock::now();
        const std::string text = expect_error(
            ErrorCode::PeerFailure,
            [&] { comm->all_reduce(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::Sum); },
            "all_reduce after rank 2 died");
        const auto took = std::chrono::steady_clock::now() - start;
        CHECK(contains(text, "rank 2")) << text;
        CHECK_LT(took, std::chrono::seconds(5)) << std::chrono::duration<double>(took).count() << " s: " << text;
      },
      std::chrono::milliseconds(120'000), {2}));
}

// A rank stopped (SIGSTOP) after a collective: the others fail soon after
// their timeout, name that rank alone as missing, and tear down without
// waiting for its goodbye.
TEST_P(CollErrors, StoppedRankIsNamedAloneAndTheOthersFailSoonAfterTheTimeout) {
  ASSERT_TRUE(run_coll_ranks(
      {GetParam(), 4},
      [](RankEnv& env) {
        CommOptions options;
        options.provider = env.provider();
        options.tag = "stopped";
        options.timeout = std::chrono::milliseconds(2000);
        auto comm = Communicator::create(env.store_ptr(), env.rank(), env.world_size(), options);
        std::vector<float> buf(std::size_t{1} << 16, 1.0f);
        comm->all_reduce(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::Sum);
        env.store().set("stopped/pid/" + std::to_string(env.rank()), std::to_string(::getpid()));
        env.barrier("before");
        if (env.rank() == 3) {
          ::raise(SIGSTOP);
          env.kill_self();  // not reached: rank 0 kills it while it is stopped
        }
        const auto start = std::chrono::steady_clock::now();
        std::string text;
        const std::string named = named_missing(
            [&] { comm->all_reduce(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::Sum); },
            "all_reduce with rank 3 stopped", &text);
        const auto failed = std::chrono::steady_clock::now() - start;
        CHECK(contains(named, "rank 3")) << text;
        for (int r = 0; r < 3; ++r) {
          CHECK(!contains(named, "rank " + std::to_string(r)) && !contains(named, ", " + std::to_string(r)))
              << "rank " << r << " is waiting, not missing: " << text;
        }
        CHECK_LT(failed, std::chrono::milliseconds(3500)) << std::chrono::duration<double>(failed).count() << " s";
        const auto teardown = std::chrono::steady_clock::now();
        comm.reset();
        const auto took = std::chrono::steady_clock::now() - teardown;
        CHECK_LT(took, std::chrono::milliseconds(1500))
            << "teardown " << std::chrono::duration<double>(took).count() << " s";
        env.store().set("stopped/failed/" + std::to_string(env.rank()), std::string_view("1"));
        if (env.rank() == 0) {
          env.store().wait({"stopped/failed/0", "stopped/failed/1", "stopped/failed/2"},
                           std::chrono::milliseconds(30'000));
          ::kill(std::stoi(env.store().get_string("stopped/pid/3")), SIGKILL);
        }
      },
      std::chrono::milliseconds(120'000), {3}));
}

// Rank 3 stops before a gather to rank 1: rank 1 waits in that gather (#2)
// while ranks 0 and 2, whose parts went out, go on to the next collective
// (#3) and time out there. Rank 1's own timeout is longer, so it is still
// waiting, alive, when they report (as when its report has not reached them
// yet): every message names rank 3 and no live rank as missing.
TEST_P(CollErrors, RankBlockedInAnEarlierCollectiveIsNotNamedMissing) {
  ASSERT_TRUE(run_coll_ranks(
      {GetParam(), 4},
      [](RankEnv& env) {
        CommOptions options;
        options.provider = env.provider();
        options.tag = "behind";
        options.timeout = std::chrono::milliseconds(env.rank() == 1 ? 6000 : 2000);
        auto comm = Communicator::create(env.store_ptr(), env.rank(), env.world_size(), options);
        std::vector<float> buf(1024, 1.0f), gathered(4 * 1024);
        comm->all_reduce(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::Sum);  // #1
        env.store().set("behind/pid/" + std::to_string(env.rank()), std::to_string(::getpid()));
        env.barrier("before");
        if (env.rank() == 3) {
          ::raise(SIGSTOP);
          env.kill_self();  // not reached: rank 0 kills it while it is stopped
        }
        std::string text;
        std::string named;
        if (env.rank() == 1) {
          named = named_missing([&] { comm->gather(buf.data(), gathered.data(), buf.size(), DataType::Float32, 1); },
                                "gather #2 with rank 3 stopped", &text);
        } else {
          comm->gather(buf.data(), nullptr, buf.size(), DataType::Float32, 1);  // #2: the part goes out
          named = named_missing(
              [&] { comm->all_reduce(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::Sum); },
              "all_reduce #3 with rank 3 stopped and rank 1 in gather #2", &text);
        }
        CHECK(contains(named, "rank 3") || contains(named, ", 3")) << text;
        for (int r = 0; r < 3; ++r) {
          CHECK(!contains(named, "rank " + std::to_string(r)) && !contains(named, ", " + std::to_string(r)))
              << "rank " << r << " is alive and waiting, not missing: " << text;
        }
        // The communicators stay up until every survivor has its message:
        // a closed one would be reported as not answering.
        env.store().set("behind/failed/" + std::to_string(env.rank()), std::string_view("1"));
        env.store().wait({"behind/failed/0", "behind/failed/1", "behind/failed/2"}, std::chrono::milliseconds(30'000));
        if (env.rank() == 0) ::kill(std::stoi(env.store().get_string("behind/pid/3")), SIGKILL);
      },
      std::chrono::milliseconds(120'000), {3}));
}

// abort() fails the pending operation at once and tells the peer.
TEST_P(CollErrors, AbortFailsPendingWorkAndTellsPeers) {
  ASSERT_TRUE(run_coll_ranks({GetParam(), 2}, [](RankEnv& env) {
    auto comm = make_comm(env, "abort");
    std::vector<float> buf(1024, 1.0f);
    if (env.rank() == 0) {
      // Rank 1 does not join: the operation stays pending until abort().
      Work work = comm->iall_reduce(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::Sum);
      CHECK(!work.test());
      comm->abort("stopping for the test");
      const std::string text = expect_error(
          ErrorCode::InvalidState, [&] { work.wait(); }, "wait after abort");
      CHECK(contains(text, "stopping for the test")) << text;
      expect_error(
          ErrorCode::InvalidState, [&] { comm->barrier(); }, "barrier after abort");
      env.store().set("abort/done", std::string_view("1"));
    } else {
      env.store().get("abort/done", std::chrono::milliseconds(30'000));
      const std::string text = expect_error(
          ErrorCode::PeerFailure,
          [&] { comm->all_reduce(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::Sum); },
          "all_reduce after the peer aborted");
      CHECK(contains(text, "rank 0 reports: aborted: stopping for the test")) << text;
    }
  }));
}

// Bad arguments are refused before anything is sent, and the communicator
// stays usable.
TEST_P(CollErrors, BadArgumentsAreRefusedLocally) {
  ASSERT_TRUE(run_coll_ranks({GetParam(), 2}, [](RankEnv& env) {
    auto comm = make_comm(env, "args");
    std::vector<std::int32_t> buf(8, 1);
    auto bad = [&](const char* what, auto&& call, const char* part) {
      const std::string text = expect_error(ErrorCode::InvalidArgument, call, what);
      CHECK(contains(text, part)) << what << ": " << text;
    };
    bad(
        "avg on integers", [&] { comm->all_reduce(buf.data(), buf.data(), 8, DataType::Int32, ReduceOp::Avg); },
        "avg is defined for floating types only");
    bad(
        "root out of range", [&] { comm->broadcast(buf.data(), 8, DataType::Int32, 2); }, "root 2");
    bad(
        "null buffer", [&] { comm->all_reduce(nullptr, buf.data(), 8, DataType::Int32, ReduceOp::Sum); },
        "send buffer is null");
    bad(
        "send to self", [&] { comm->send(buf.data(), 8, DataType::Int32, env.rank()); }, "not another rank");
    std::vector<std::size_t> one(1, 0);
    bad(
        "all_to_allv sizes", [&] { comm->all_to_allv(buf.data(), one, one, buf.data(), one, one, DataType::Int32); },
        "2 entries each");
    bad(
        "huge count",
        [&] { comm->all_reduce(buf.data(), buf.data(), std::size_t{1} << 62, DataType::Int32, ReduceOp::Sum); },
        "too large");
    CHECK_EQ(comm->next_sequence(), std::uint64_t{1}) << "refused calls must not use a sequence number";
    comm->all_reduce(buf.data(), buf.data(), 8, DataType::Int32, ReduceOp::Sum);
    CHECK_EQ(buf[0], 2);
  }));
}

INSTANTIATE_TEST_SUITE_P(Coll, CollErrors, ::testing::ValuesIn(tested_providers()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return transport_label(p.param); });

}  // namespace
}  // namespace rdmx::test
