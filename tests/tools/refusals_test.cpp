// SPDX-License-Identifier: MIT
// Settings and options refused alike, through the real binary: a number
// rdmx cannot read as written (hex, octal-looking, NaN, infinity) or a
// setting it cannot honour ends the command with what was wrong, never
// with a run of something else.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "run_cli.hpp"

namespace rdmx::test {
namespace {

using std::chrono::seconds;

// `perf coll -f nan` and `-f inf` used to shrink the sweep to its first size.
TEST(OptionRefusal, PerfCollStepFactorMustBeAFiniteNumberAboveOne) {
  for (const char* factor : {"nan", "inf", "-inf", "NaN", "0x2"}) {
    const CliResult r =
        run_cli({"perf", "coll", "all_reduce", "--np", "2", "-b", "8", "-e", "1K", "-f", factor}, {}, seconds(30));
    EXPECT_EQ(r.exit_code, 2) << factor << ": " << r.out << r.err;
    EXPECT_TRUE(contains(r.err, std::string("'") + factor + "' is not a decimal number")) << r.err;
    EXPECT_TRUE(contains(r.err, "--stepfactor")) << r.err;
    EXPECT_FALSE(contains(r.out, "all_reduce")) << "ran: " << r.out;
  }
  for (const char* factor : {"1", "0.5", "0"}) {
    const CliResult r =
        run_cli({"perf", "coll", "all_reduce", "--np", "2", "-b", "8", "-e", "8", "-f", factor}, {}, seconds(30));
    EXPECT_EQ(r.exit_code, 2) << factor << ": " << r.out << r.err;
    EXPECT_TRUE(contains(r.err, std::string("-f ") + factor + ": the step factor must be a finite number above 1"))
        << r.err;
  }
}

// CLI11 reads integers with base 0: "-n 010" was 8 iterations, "--np 0x2" 2 ranks.
TEST(OptionRefusal, NumbersOnTheCommandLineAreDecimal) {
  // Each command and its one value that is not decimal.
  const std::vector<std::pair<std::vector<std::string>, std::string>> commands{
      {{"perf", "coll", "all_reduce", "--np", "0x2", "-b", "8", "-e", "8"}, "0x2"},
      {{"perf", "coll", "all_reduce", "--np", "2", "-b", "8", "-e", "8", "-n", "010"}, "010"},
      {{"perf", "p2p", "write_lat", "-n", "0x10"}, "0x10"},
      {{"run", "-n", "0x2", "--", "/bin/true"}, "0x2"},
      {{"bench", "--np", "02"}, "02"},
      {{"plan", "--model", "resnet-50", "--target-efficiency", "nan"}, "nan"},
      {{"plan", "--model", "resnet-50", "--batch", "inf"}, "inf"},
      {{"plan", "collective", "--nodes", "0x4"}, "0x4"},
      {{"plan", "calibrate", "--seconds", "nan"}, "nan"},
      {{"info", "--communicator", "--np", "0x2"}, "0x2"},
  };
  for (const auto& [args, value] : commands) {
    std::string typed;
    for (const auto& a : args) typed += " " + a;
    const CliResult r = run_cli(args, {}, seconds(30));
    EXPECT_EQ(r.exit_code, 2) << "rdmx" << typed << ": " << r.out << r.err;
    // Refused as not decimal, or by the option's range where that speaks first ("inf" is above any).
    EXPECT_TRUE(contains(r.err, "'" + value + "' is not a whole number in decimal") ||
                contains(r.err, "'" + value + "' is not a decimal number") ||
                contains(r.err, "Value " + value + " not in range"))
        << "rdmx" << typed << ": " << r.err;
  }
}

// RDMX_COLL_BUFFSIZE=1T used to warn and run with 4M; RDMX_COLL_SLOTS=0 to
// fail as "x 1 slots". Both are refused, naming the variable, the value
// and what is accepted.
TEST(SettingRefusal, BadCollectiveBufferSettingsStopPerfCollWithTheirNames) {
  const CliResult big = run_cli({"perf", "coll", "all_reduce", "--np", "2", "-b", "8", "-e", "8", "-n", "1", "-w", "1"},
                                {{"RDMX_COLL_BUFFSIZE", "1T"}}, seconds(120));
  EXPECT_NE(big.exit_code, 0) << big.out << big.err;
  EXPECT_TRUE(contains(big.err, "RDMX_COLL_BUFFSIZE=\"1T\" is not a size")) << big.err;
  EXPECT_TRUE(contains(big.err, "from 1K to 1G")) << big.err;
  EXPECT_FALSE(contains(big.out, "# Out of bounds values")) << "ran: " << big.out;

  const CliResult none =
      run_cli({"perf", "coll", "all_reduce", "--np", "2", "-b", "8", "-e", "8", "-n", "1", "-w", "1"},
              {{"RDMX_COLL_SLOTS", "0"}}, seconds(120));
  EXPECT_NE(none.exit_code, 0) << none.out << none.err;
  EXPECT_TRUE(contains(none.err, "RDMX_COLL_SLOTS=\"0\" is out of range")) << none.err;
  EXPECT_TRUE(contains(none.err, "from 2 to 65536")) << none.err;
  EXPECT_FALSE(contains(none.err, "x 1 slots")) << none.err;
}

// RDMX_TIMEOUT=0x10 was read as 16 s.
TEST(SettingRefusal, AHexTimeoutIsShownRefusedByInfo) {
  const CliResult r = run_cli({"info"}, {{"RDMX_TIMEOUT", "0x10"}}, seconds(60));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"((^|\n)  RDMX_TIMEOUT += 0x10 \(refused\))"))) << r.out;
  EXPECT_TRUE(contains(r.out, "RDMX_TIMEOUT=\"0x10\" is not a duration")) << r.out;
}

}  // namespace
}  // namespace rdmx::test
