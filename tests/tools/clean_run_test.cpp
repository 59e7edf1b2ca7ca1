// SPDX-License-Identifier: MIT
// Successful jobs print nothing alarming: on every provider the host can run,
// a job under `rdmx run` and a `rdmx perf coll` sweep, each repeated, finish
// with nothing logged at WARN (an orderly teardown is not a peer failure).
// The verbs provider's clean job is checked in the soft-RoCE guest
// (scripts/verbs-guest-tests.sh).
#include <gtest/gtest.h>

#include <string>

#include "run_cli.hpp"
#include "support/providers.hpp"

namespace rdmx::test {
namespace {

// Repeated because teardown races differ from run to run.
constexpr int kRepeats = 3;

void expect_no_warning(const CliResult& r, const std::string& what) {
  EXPECT_EQ(r.exit_code, 0) << what << "\nstderr:\n" << r.err;
  for (const std::string* stream : {&r.out, &r.err}) {
    EXPECT_EQ(stream->find(" RDMX WARN "), std::string::npos) << what << " logged a warning:\n" << *stream;
  }
}

class CleanJob : public ::testing::TestWithParam<std::string> {};

TEST_P(CleanJob, FourRanksOfAProgramLogNothingAtWarn) {
  for (int i = 0; i < kRepeats; ++i) {
    const CliResult r = run_cli({"run", "-n", "4", "--provider", GetParam(), "--time-limit", "60", "--",
                                 example_path("rdmx_all_reduce"), "100000"},
                                {{"RDMX_DEBUG", "WARN"}, {"RDMX_TIMEOUT", "30"}});
    expect_no_warning(
        r, "rdmx run -n 4 --provider " + GetParam() + " -- rdmx_all_reduce (run " + std::to_string(i + 1) + ")");
    EXPECT_NE(r.out.find("every element correct"), std::string::npos) << r.out;
  }
}

TEST_P(CleanJob, PerfCollSweepsLogNothingAtWarn) {
  for (int i = 0; i < kRepeats; ++i) {
    const CliResult r = run_cli({"perf", "coll", "all_reduce,all_gather,broadcast", "--provider", GetParam(), "--np",
                                 i % 2 == 0 ? "3" : "4", "-b", "8", "-e", "256K", "-f", "32", "-n", "3", "-w", "1"},
                                {{"RDMX_DEBUG", "WARN"}, {"RDMX_TIMEOUT", "30"}});
    expect_no_warning(r, "rdmx perf coll --provider " + GetParam() + " (run " + std::to_string(i + 1) + ")");
  }
}

INSTANTIATE_TEST_SUITE_P(Providers, CleanJob, ::testing::ValuesIn(tested_providers()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace rdmx::test
