// SPDX-License-Identifier: MIT
// Growing a running job: new processes join through the store and become
// ranks of a communicator the existing ranks make with them, without
// restarting anything; after a failure, shrink then grow gives the job its
// size back. Real processes: the newcomer is a rank of the test run that
// stays out of the first communicator.
#include <chrono>
#include <string>
#include <vector>

#include "coll/coll_support.hpp"

namespace rdmx::test {
namespace {

using namespace std::chrono_literals;

class CollGrow : public ::testing::TestWithParam<std::string> {
 protected:
  static void TearDownTestSuite() { NetNsPair::destroy(); }
};

CommOptions options_for(RankEnv& env, const std::string& tag) {
  CommOptions options;
  options.provider = env.provider();
  options.tag = tag;
  options.timeout = 20s;
  return options;
}

// Every rank contributes rank + 1 at each element: the sum is n(n+1)/2.
void check_all_reduce(Communicator& comm, const std::string& what) {
  const std::size_t n = 4096;
  std::vector<std::int64_t> buf(n, comm.rank() + 1);
  comm.all_reduce(buf.data(), buf.data(), n, DataType::Int64, ReduceOp::Sum);
  const std::int64_t want = static_cast<std::int64_t>(comm.size()) * (comm.size() + 1) / 2;
  for (std::size_t i = 0; i < n; ++i) {
    if (buf[i] != want) FAIL_RANK() << what << ": element " << i << " is " << buf[i] << ", expected " << want;
  }
}

TEST_P(CollGrow, NewProcessesJoinARunningCommunicator) {
  ASSERT_TRUE(run_coll_ranks({GetParam(), 5}, [](RankEnv& env) {
    // Ranks 0-2 are the job; 3 and 4 arrive later, as new processes do.
    if (env.rank() >= 3) {
      env.store().get_string("grow/started");
      auto comm = Communicator::join(env.store_ptr(), options_for(env, "grow"));
      CHECK_EQ(comm->size(), 5);
      CHECK_GE(comm->rank(), 3);
      check_all_reduce(*comm, "a newcomer in the grown communicator");
      return;
    }
    auto comm = Communicator::create(env.store_ptr(), env.rank(), 3, options_for(env, "grow"));
    check_all_reduce(*comm, "before");
    if (env.rank() == 0) env.store().set("grow/started", std::string_view("1"));
    auto grown = comm->grow(2);
    CHECK_EQ(grown->size(), 5);
    CHECK_EQ(grown->rank(), env.rank());
    check_all_reduce(*grown, "the grown communicator");
    check_all_reduce(*comm, "the old communicator, still usable");
  }));
}

TEST_P(CollGrow, AReplacementRestoresTheSizeAfterAShrink) {
  ASSERT_TRUE(run_coll_ranks({GetParam(), 5},
                             [](RankEnv& env) {
                               if (env.rank() == 4) {
                                 // The replacement: started once the job lost a rank.
                                 env.store().get_string("replace/needed");
                                 auto comm = Communicator::join(env.store_ptr(), options_for(env, "replace"));
                                 CHECK_EQ(comm->rank(), 3);
                                 check_all_reduce(*comm, "the replacement");
                                 return;
                               }
                               auto comm =
                                   Communicator::create(env.store_ptr(), env.rank(), 4, options_for(env, "replace"));
                               check_all_reduce(*comm, "before");
                               // Every rank is out of the all_reduce before rank 1 dies (a barrier
                               // on the communicator could itself be cut short by the death).
                               env.store().set("replace/out/" + std::to_string(env.rank()), std::string_view("1"));
                               env.store().wait({"replace/out/0", "replace/out/1", "replace/out/2", "replace/out/3"});
                               if (env.rank() == 1) env.kill_self();
                               try {
                                 check_all_reduce(*comm, "after the death");
                                 FAIL_RANK() << "the all_reduce after rank 1 died succeeded";
                               } catch (const Error& e) {
                                 CHECK(e.code() == ErrorCode::PeerFailure || e.code() == ErrorCode::Timeout)
                                     << e.what();
                               }
                               ShrinkResult shrunk = comm->shrink();
                               CHECK_EQ(shrunk.communicator->size(), 3);
                               check_all_reduce(*shrunk.communicator, "shrunk");
                               if (shrunk.communicator->rank() == 0)
                                 env.store().set("replace/needed", std::string_view("1"));
                               auto grown = shrunk.communicator->grow(1);
                               CHECK_EQ(grown->size(), 4);
                               check_all_reduce(*grown, "grown back");
                             },
                             120'000ms, {1}));
}

TEST_P(CollGrow, AJoinWithNobodyGrowingTimesOutSayingWhatToDo) {
  ASSERT_TRUE(run_coll_ranks({GetParam(), 1}, [](RankEnv& env) {
    CommOptions options = options_for(env, "lonely");
    options.timeout = 300ms;
    try {
      Communicator::join(env.store_ptr(), options);
      FAIL_RANK() << "join returned with nobody growing";
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::Timeout) << e.what();
      CHECK(std::string(e.what()).find("grow(count)") != std::string::npos) << e.what();
    }
  }));
}

INSTANTIATE_TEST_SUITE_P(Coll, CollGrow, ::testing::ValuesIn(tested_providers()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return transport_label(p.param); });

}  // namespace
}  // namespace rdmx::test
