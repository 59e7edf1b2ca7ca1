// SPDX-License-Identifier: MIT
// The communicator itself: creation from the environment, placement and
// transports per peer, split, asynchronous operations.
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "coll/coll_support.hpp"
#include "coll/communicator_internal.hpp"

namespace rdmx::test {
namespace {

class Communicators : public ::testing::TestWithParam<std::string> {
 protected:
  static void TearDownTestSuite() { NetNsPair::destroy(); }
};

// Local ranks share a host; with mix, rank 0 reaches everyone over tcp while
// the ranks of the second host reach each other over shm.
TEST_P(Communicators, PlacementAndTransportPerPeer) {
  ASSERT_TRUE(run_coll_ranks({GetParam(), 3}, [&](RankEnv& env) {
    auto comm = make_comm(env, "placement");
    CHECK_EQ(comm->rank(), env.rank());
    CHECK_EQ(comm->size(), 3);
    // Network namespaces share the host name and boot id: one host as far as placement goes.
    CHECK_EQ(comm->local_size(), 3);
    CHECK_EQ(comm->local_rank(), env.rank());
    const auto providers = comm->peer_providers();
    CHECK_EQ(providers.size(), std::size_t{3});
    for (int p = 0; p < 3; ++p) {
      const std::string got = providers[static_cast<std::size_t>(p)];
      std::string want = GetParam();
      if (p == env.rank()) want = "";
      if (mixed(GetParam()) && p != env.rank()) want = (p == 0 || env.rank() == 0) ? "tcp" : "shm";
      CHECK_EQ(got, want) << "transport from rank " << env.rank() << " to rank " << p;
    }
  }));
}

TEST_P(Communicators, SplitByColorOrderedByKey) {
  ASSERT_TRUE(run_coll_ranks({GetParam(), 5}, [&](RankEnv& env) {
    auto comm = make_comm(env, "parent");
    const int r = env.rank();
    // Colors: even ranks, odd ranks; rank 4 joins none. Keys reverse the order.
    const int color = r == 4 ? -1 : r % 2;
    auto sub = comm->split(color, -r);
    if (r == 4) {
      CHECK(sub == nullptr);
    } else {
      CHECK(sub != nullptr);
      CHECK_EQ(sub->size(), 2);
      const int expected_rank = (r == 0 || r == 1) ? 1 : 0;  // higher old rank has the lower key
      CHECK_EQ(sub->rank(), expected_rank);
      std::int64_t mine = r, sum = 0;
      sub->all_reduce(&mine, &sum, 1, DataType::Int64, ReduceOp::Sum);
      CHECK_EQ(sum, color == 0 ? std::int64_t{0 + 2} : std::int64_t{1 + 3});
    }
    // The parent goes on working beside its children.
    std::int64_t one = 1, total = 0;
    comm->all_reduce(&one, &total, 1, DataType::Int64, ReduceOp::Sum);
    CHECK_EQ(total, std::int64_t{5});
  }));
}

// Asynchronous operations run in call order, overlap with the caller, and
// mix with blocking calls.
TEST_P(Communicators, AsynchronousOperationsCompleteInOrder) {
  ASSERT_TRUE(run_coll_ranks({GetParam(), 3}, [&](RankEnv& env) {
    auto comm = make_comm(env, "async");
    const int n = 3, r = env.rank();
    constexpr std::size_t kCount = 200000;
    std::vector<float> a(kCount, static_cast<float>(r + 1)), b(kCount * n), c(64, 0.0f);
    std::vector<Work> works;
    works.push_back(comm->iall_reduce(a.data(), a.data(), kCount, DataType::Float32, ReduceOp::Sum));
    works.push_back(comm->iall_gather(a.data(), b.data(), kCount, DataType::Float32));  // sees the reduced a
    if (r == 0) std::fill(c.begin(), c.end(), 7.0f);
    works.push_back(comm->ibroadcast(c.data(), c.size(), DataType::Float32, 0));
    comm->barrier();  // blocking, behind the three
    for (auto& w : works) {
      w.wait();
      CHECK(w.test());
    }
    for (std::size_t i = 0; i < kCount; i += 997) CHECK_EQ(a[i], 6.0f) << "all_reduce element " << i;
    for (std::size_t i = 0; i < kCount * n; i += 1009) CHECK_EQ(b[i], 6.0f) << "all_gather element " << i;
    for (float v : c) CHECK_EQ(v, 7.0f);
    // wait(timeout) on a finished operation returns at once; test() on it is true.
    works[0].wait(std::chrono::milliseconds(0));
  }));
}

// A call's hooks run on the thread that runs it: `then` after the operation
// and before anyone learns it finished, `done` last with its outcome, both
// before the Work completes, on every path (inline, queued, failed, dropped).
TEST_P(Communicators, CallHooksRunBeforeTheWorkCompletes) {
  ASSERT_TRUE(run_coll_ranks({GetParam(), 2}, [&](RankEnv& env) {
    auto comm = make_comm(env, "hooks");
    std::vector<std::string> events;
    auto hooked = [&](std::int32_t* value, const char* name) {
      coll::Call call;
      call.op = CollOp::AllReduce;
      call.send = value;
      call.recv = value;
      call.count = 1;
      call.type = DataType::Int32;
      call.then = [&events, value, name] { events.push_back(std::string(name) + " then " + std::to_string(*value)); };
      call.done = [&events, name](std::exception_ptr e) {
        events.push_back(std::string(name) + (e ? " failed" : " done"));
      };
      return call;
    };
    std::int32_t a = 1, b = 10, c = 100;
    coll::submit(*comm, hooked(&a, "inline"), false);  // nothing queued: runs on this thread
    CHECK_EQ(events.size(), std::size_t{2});
    Work wb = coll::submit(*comm, hooked(&b, "queued"), true);
    Work wc = coll::submit(*comm, hooked(&c, "behind"), true);
    wc.wait();
    CHECK(wb.test());
    const std::vector<std::string> want{"inline then 2", "inline done",     "queued then 20",
                                        "queued done",   "behind then 200", "behind done"};
    CHECK(events == want) << ::testing::PrintToString(events);
    // A `then` that throws fails the operation; `done` sees that error.
    events.clear();
    std::int32_t d = 1;
    coll::Call failing = hooked(&d, "failing");
    failing.then = [] { throw Error(ErrorCode::InvalidArgument, "the copy-out refused", {.op = "then"}); };
    Work wd = coll::submit(*comm, std::move(failing), true);
    try {
      wd.wait();
      ADD_FAILURE() << "the failing hook's operation completed";
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("the copy-out refused") != std::string::npos) << e.what();
    }
    CHECK(events == std::vector<std::string>{"failing failed"}) << ::testing::PrintToString(events);
  }));
}

// A task runs in call order with the operations around it, and the blocking
// calls it makes run inline within it; what it throws fails its Work.
TEST_P(Communicators, TasksRunInCallOrderWithTheirCallsInline) {
  ASSERT_TRUE(run_coll_ranks({GetParam(), 2}, [&](RankEnv& env) {
    auto comm = make_comm(env, "tasks");
    const int r = env.rank(), peer = 1 - r;
    std::int32_t a = r + 1, b = 10 * (r + 1), seen_a = 0, got = 0;
    Work wa = comm->iall_reduce(&a, &a, 1, DataType::Int32, ReduceOp::Sum);
    Work wt = coll::submit_task(
        *comm,
        [&] {
          seen_a = a;  // the all_reduce before it has run
          std::int32_t mine = 100 + r;
          if (r == 0) {
            comm->send(&mine, 1, DataType::Int32, peer);
            comm->recv(&got, 1, DataType::Int32, peer);
          } else {
            comm->recv(&got, 1, DataType::Int32, peer);
            comm->send(&mine, 1, DataType::Int32, peer);
          }
        },
        "exchange", true);
    Work wb = comm->iall_reduce(&b, &b, 1, DataType::Int32, ReduceOp::Sum);
    wb.wait();
    CHECK(wa.test());
    CHECK(wt.test());
    CHECK_EQ(seen_a, 3);
    CHECK_EQ(got, 100 + peer);
    CHECK_EQ(b, 30);
    Work failing = coll::submit_task(
        *comm, [] { throw Error(ErrorCode::InvalidArgument, "the task refused"); }, "refusal", true);
    try {
      failing.wait();
      ADD_FAILURE() << "the failing task completed";
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("the task refused") != std::string::npos) << e.what();
    }
    // The communicator goes on.
    std::int32_t one = 1, two = 0;
    comm->all_reduce(&one, &two, 1, DataType::Int32, ReduceOp::Sum);
    CHECK_EQ(two, 2);
  }));
}

// Buffers that overlap in other ways than the in-place forms (MPI_IN_PLACE's
// reduce_scatter result in the first block, partly overlapping ranges) give
// the same results as separate buffers.
TEST_P(Communicators, OverlappingBuffersGiveCorrectResults) {
  ASSERT_TRUE(run_coll_ranks({GetParam(), 3}, [&](RankEnv& env) {
    auto comm = make_comm(env, "overlap");
    const int n = 3, r = env.rank();
    constexpr std::size_t kCount = 5000;  // large enough for in-place WRITEs
    std::vector<std::int32_t> buf(kCount * n);
    for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<std::int32_t>(i) * (r + 1);
    comm->reduce_scatter(buf.data(), buf.data(), kCount, DataType::Int32, ReduceOp::Sum);  // MPI_IN_PLACE form
    for (std::size_t i = 0; i < kCount; ++i) {
      CHECK_EQ(buf[i], static_cast<std::int32_t>(static_cast<std::size_t>(r) * kCount + i) * 6) << "element " << i;
    }
    // all_gather whose send block starts one element into the receive buffer.
    std::vector<std::int32_t> all(kCount * n + 1);
    for (std::size_t i = 0; i < kCount; ++i) all[1 + i] = static_cast<std::int32_t>(i) + 1000 * r;
    comm->all_gather(all.data() + 1, all.data(), kCount, DataType::Int32);
    for (int j = 0; j < n; ++j) {
      for (std::size_t i = 0; i < kCount; i += 7) {
        CHECK_EQ(all[static_cast<std::size_t>(j) * kCount + i], static_cast<std::int32_t>(i) + 1000 * j);
      }
    }
  }));
}

// Communicator::from_env() reads the launcher's variables (here rdmx's own).
TEST(CommunicatorFromEnv, JoinsThroughTheLaunchersVariables) {
  ASSERT_TRUE(run_coll_ranks({"shm", 3}, [&](RankEnv& env) {
    ::setenv("RDMX_RANK", std::to_string(env.rank()).c_str(), 1);
    ::setenv("RDMX_WORLD_SIZE", "3", 1);
    ::setenv("RDMX_STORE", ("file:" + env.dir() + "/env-store").c_str(), 1);
    auto comm = Communicator::from_env();
    CHECK_EQ(comm->rank(), env.rank());
    CHECK_EQ(comm->size(), 3);
    std::int32_t v = env.rank() + 1, sum = 0;
    comm->all_reduce(&v, &sum, 1, DataType::Int32, ReduceOp::Sum);
    CHECK_EQ(sum, 6);
  }));
}

INSTANTIATE_TEST_SUITE_P(Coll, Communicators, ::testing::ValuesIn(tested_providers()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return transport_label(p.param); });

}  // namespace
}  // namespace rdmx::test
