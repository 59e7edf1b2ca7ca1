// SPDX-License-Identifier: MIT
// A usage error of the rdmx command: the reason, the nearest valid word when
// one was mistyped, the one-line usage and where the help is; not the whole
// help, which would bury the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "run_cli.hpp"

namespace rdmx::test {
namespace {

std::size_t lines(const std::string& text) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

TEST(UsageErrors, AMistypedOptionGetsTheNearestOneAndWhereHelpIs) {
  const CliResult r = run_cli({"run", "-n", "2", "--provder", "shm", "--", "true"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("did you mean --provider (not --provder)?"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Usage: rdmx run"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Run 'rdmx run --help' for every option."), std::string::npos) << r.err;
  // Not the help itself: no option descriptions, a few lines in all.
  EXPECT_EQ(r.err.find("lines of a failed rank's output"), std::string::npos) << r.err;
  EXPECT_LE(lines(r.err), 5u) << r.err;
}

TEST(UsageErrors, AMistypedSubcommandGetsTheNearestOne) {
  const CliResult r = run_cli({"bnech"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("did you mean bench (not bnech)?"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Run 'rdmx --help' for every option and subcommand."), std::string::npos) << r.err;
  EXPECT_LE(lines(r.err), 5u) << r.err;

  const CliResult flag = run_cli({"bench", "--quik"});
  EXPECT_EQ(flag.exit_code, 2) << flag.err;
  EXPECT_NE(flag.err.find("did you mean --quick (not --quik)?"), std::string::npos) << flag.err;
}

TEST(UsageErrors, NothingNearIsSuggestedForAWordFarFromEveryOption) {
  const CliResult r = run_cli({"run", "-n", "2", "--carrier-pigeon", "--", "true"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err.find("did you mean"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--carrier-pigeon"), std::string::npos) << r.err;
}

// Without --, the program's own options are read as run's.
TEST(UsageErrors, RunWithoutTheSeparatorSaysWhereItGoes) {
  const CliResult r = run_cli({"run", "-n", "2", "true", "--size", "4"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("put -- before the program and its arguments: rdmx run -n 2 -- ./prog [args]"),
            std::string::npos)
      << r.err;
  const CliResult with = run_cli({"run", "-n", "2", "--bogus", "--", "true"});
  EXPECT_EQ(with.exit_code, 2) << with.err;
  EXPECT_EQ(with.err.find("put -- before the program"), std::string::npos) << with.err;
}

}  // namespace
}  // namespace rdmx::test
