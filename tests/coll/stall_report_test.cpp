// SPDX-License-Identifier: MIT
// A rank that stops calling collectives is named early, and with what it
// was last doing: the ranks waiting for it log once at RDMX_STALL_WARN
// which rank has not arrived, its last collectives and where its program
// is (a native rank: what its main thread waits in), and the timeout's
// error carries the same. Each rank publishes its status into the store
// (RDMX_STATUS_INTERVAL); with that off, the reports say so.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "coll/coll_support.hpp"
#include "support/text.hpp"

namespace rdmx::test {
namespace {

// Sends this rank's stderr (the log) to a file of its own; returns its path.
std::string log_to_file(const RankEnv& env, const std::string& name) {
  const std::string path =
      ::testing::TempDir() + name + ".rank" + std::to_string(env.rank()) + "." + std::to_string(::getpid()) + ".log";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  CHECK(fd >= 0) << path;
  CHECK(::dup2(fd, 2) == 2);
  ::close(fd);
  return path;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> lines_with(const std::string& text, const std::string& part) {
  std::vector<std::string> found;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (contains(line, part)) found.push_back(line);
  }
  return found;
}

void all_reduce(Communicator& comm, std::vector<double>& buf) {
  comm.all_reduce(buf.data(), buf.data(), buf.size(), DataType::Float64, ReduceOp::Sum);
}

// The late rank's wait, in a function of its own as a data loader would be.
void sleep_like_a_loader(std::chrono::milliseconds how_long) { std::this_thread::sleep_for(how_long); }

class StallReport : public ::testing::TestWithParam<std::string> {
 protected:
  static void TearDownTestSuite() { NetNsPair::destroy(); }
};

// Rank 2 sleeps 3 s before the second all_reduce; the others log once, at
// about 1 s, that rank 2 has not called it, its last collective and that
// its main thread sleeps; then all three finish the call.
TEST_P(StallReport, TheWaitingRanksLogOnceWhoIsLateAndWhatItDoes) {
  ASSERT_TRUE(run_coll_ranks({GetParam(), 3}, [](RankEnv& env) {
    ::setenv("RDMX_STALL_WARN", "1s", 1);
    ::setenv("RDMX_STATUS_INTERVAL", "100ms", 1);
    const std::string log = env.rank() == 2 ? "" : log_to_file(env, "stall_warn");
    CommOptions options;
    options.provider = env.provider();
    options.tag = "stall";
    options.timeout = std::chrono::milliseconds(20'000);
    auto comm = Communicator::create(env.store_ptr(), env.rank(), env.world_size(), options);
    std::vector<double> buf(1000, 1.0);
    all_reduce(*comm, buf);  // #1
    if (env.rank() == 2) sleep_like_a_loader(std::chrono::milliseconds(3000));
    std::fill(buf.begin(), buf.end(), 1.0);
    all_reduce(*comm, buf);  // #2
    CHECK_EQ(buf[0], 3.0);
    if (env.rank() == 2) return;
    const std::string text = read_text(log);
    const auto warnings = lines_with(text, "RDMX_STALL_WARN");
    CHECK_EQ(warnings.size(), 1u) << text;
    CHECK(contains(warnings[0], "all_reduce #2")) << text;
    CHECK(contains(warnings[0], "rank 2 has not called it")) << text;
    CHECK(contains(text, "rank 2 (")) << "the late rank's status: " << text;
    CHECK(contains(text, "out of rdmx for")) << text;
    CHECK(contains(text, "main thread sleeping")) << text;
    CHECK(contains(text, "last collectives: all_reduce #1")) << text;
  }));
}

// Two ranks with RDMX_STALL_WARN off and RDMX_STATUS_INTERVAL `interval`:
// rank 1 sleeps past rank 0's timeout (1.5 s) before all_reduce #2; on rank
// 0, the error of that all_reduce.
std::string timeout_while_rank_1_sleeps(RankEnv& env, const char* interval) {
  ::setenv("RDMX_STALL_WARN", "0", 1);
  ::setenv("RDMX_STATUS_INTERVAL", interval, 1);
  CommOptions options;
  options.provider = env.provider();
  options.tag = "stall_timeout";
  options.timeout = std::chrono::milliseconds(1500);
  auto comm = Communicator::create(env.store_ptr(), env.rank(), env.world_size(), options);
  std::vector<double> buf(1000, 1.0);
  all_reduce(*comm, buf);  // #1
  if (env.rank() == 1) {
    sleep_like_a_loader(std::chrono::milliseconds(3500));
    return "";
  }
  try {
    all_reduce(*comm, buf);
  } catch (const Error& e) {
    return e.what();
  }
  fail_rank(__FILE__, __LINE__, "all_reduce #2 without rank 1 succeeded");
}

// The timeout's error carries the late rank's status, read at the timeout.
TEST_P(StallReport, TheTimeoutCarriesTheLateRanksStatus) {
  ASSERT_TRUE(run_coll_ranks({GetParam(), 2}, [](RankEnv& env) {
    const std::string text = timeout_while_rank_1_sleeps(env, "100ms");
    if (env.rank() == 1) return;
    CHECK(contains(text, "rank 1 has not called it")) << text;
    CHECK(contains(text, "rank 1 (")) << text;
    CHECK(contains(text, "out of rdmx for")) << text;
    CHECK(contains(text, "last collectives: all_reduce #1")) << text;
    CHECK(contains(text, "main thread sleeping")) << text;
  }));
}

// RDMX_STATUS_INTERVAL=0: nothing is published, and the error says so
// rather than leaving the late rank's part out silently.
TEST_P(StallReport, WithoutStatusTheErrorSaysNoneWasPublished) {
  ASSERT_TRUE(run_coll_ranks({GetParam(), 2}, [](RankEnv& env) {
    const std::string text = timeout_while_rank_1_sleeps(env, "0");
    if (env.rank() == 1) return;
    CHECK(contains(text, "rank 1 has not called it")) << text;
    CHECK(contains(text, "rank 1 published no status (RDMX_STATUS_INTERVAL=0")) << text;
  }));
}

INSTANTIATE_TEST_SUITE_P(Coll, StallReport, ::testing::ValuesIn(tested_providers()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return transport_label(p.param); });

}  // namespace
}  // namespace rdmx::test
