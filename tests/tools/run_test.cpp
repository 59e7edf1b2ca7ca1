// SPDX-License-Identifier: MIT
// rdmx run: real local ranks, the environment they get, and what happens when one dies.
#include <gtest/gtest.h>

#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "run_cli.hpp"

namespace rdmx::test {
namespace {

TEST(RunCommand, StartsRanksWithTheirEnvironmentAndPrefixesOutput) {
  const CliResult r = run_cli({"run", "-n", "3", "--", "sh", "-c",
                               "echo rank=$RDMX_RANK size=$RDMX_WORLD_SIZE local=$RDMX_LOCAL_RANK "
                               "store=${RDMX_STORE%%:*}; echo to-stderr >&2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string n = std::to_string(rank);
    EXPECT_NE(r.out.find("[" + n + "] rank=" + n + " size=3 local=" + n + " store=127.0.0.1"), std::string::npos)
        << r.out;
    EXPECT_NE(r.err.find("[" + n + "] to-stderr"), std::string::npos) << r.err;
  }
}

TEST(RunCommand, ProviderOptionSetsTheEnvironment) {
  const CliResult r = run_cli({"run", "-n", "1", "--provider", "tcp", "--", "sh", "-c", "echo p=$RDMX_PROVIDER"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("[0] p=tcp"), std::string::npos) << r.out;
}

TEST(RunCommand, AFailedRankStopsTheOthersAndItsStatusIsTheJobs) {
  const auto start = std::chrono::steady_clock::now();
  const CliResult r = run_cli({"run", "-n", "3", "--", "sh", "-c",
                               "if [ $RDMX_RANK = 1 ]; then echo last words of one; exit 7; fi; exec sleep 60"});
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_NE(r.err.find("rank 1 (pid"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exited with status 7"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("| last words of one"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("stopping the other ranks still running (0, 2)"), std::string::npos) << r.err;
  // The sleeping ranks were stopped, not waited for.
  EXPECT_LT(took, std::chrono::seconds(30));
}

TEST(RunCommand, ARankKilledByASignalIsNamed) {
  const CliResult r =
      run_cli({"run", "-n", "2", "--", "sh", "-c", "if [ $RDMX_RANK = 0 ]; then kill -SEGV $$; fi; exec sleep 60"});
  EXPECT_EQ(r.exit_code, 128 + 11) << r.err;
  EXPECT_NE(r.err.find("rank 0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("SIGSEGV"), std::string::npos) << r.err;
}

// Ranks killed by a signal cannot close their devices; rdmx run removes what
// they left (the shm provider's socket files), so the job leaves nothing behind.
TEST(RunCommand, RanksItKillsLeaveNoSocketFiles) {
  char dir_template[] = "/tmp/rdmx-run-shm-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const CliResult r = run_cli({"run", "-n", "2", "--provider", "shm", "--time-limit", "3", "--", cli_path(), "perf",
                               "p2p", "write_lat", "-n", "100000000", "--warmup", "10"},
                              {{"RDMX_SHM_DIR", dir}});
  EXPECT_EQ(r.exit_code, 124) << r.err;
  std::vector<std::string> left;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") left.push_back(e->d_name);
    }
    ::closedir(d);
  }
  EXPECT_TRUE(left.empty()) << "left in " << dir << ": " << left.front() << "\n" << r.err;
  ::rmdir(dir.c_str());
}

TEST(RunCommand, TimeLimitEndsAStuckJob) {
  const CliResult r = run_cli({"run", "-n", "2", "--time-limit", "1", "--", "sleep", "60"});
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_NE(r.err.find("time limit of 1 s"), std::string::npos) << r.err;
}

TEST(RunCommand, RunsAnRdmxProgram) {
  // Any rdmx program: here the perftest-style latency test between the two ranks.
  const CliResult r = run_cli({"run", "-n", "2", "--provider", "tcp", "--", cli_path(), "perf", "p2p", "write_lat",
                               "-n", "200", "--warmup", "10"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("[0]  #bytes #iterations"), std::string::npos) << r.out;
}

TEST(RunCommand, ArgumentErrorsGiveUsage) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"run"},
                                             {"run", "--", "true"},
                                             {"run", "-n", "0", "--", "true"},
                                             {"run", "-n", "two", "--", "true"},
                                             {"run", "-n", "2"},
                                             {"run", "-n", "2", "--bogus", "--", "true"},
                                             {"run", "-n", "2", "--provider", "carrier-pigeon", "--", "true"}}) {
    const CliResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << args.size() << " args: " << r.err;
    EXPECT_NE(r.err.find("Usage: rdmx run"), std::string::npos) << r.err;
  }
}

// Every rank failing alike prints its error once: the first rank's line, then
// the launcher's one-line account, not N copies and a repeat in the report.
TEST(RunCommand, AnErrorEveryRankPrintsAppearsOnce) {
  const CliResult r =
      run_cli({"run", "-n", "3", "--", "sh", "-c",
               "echo \"app: rdmx: it broke [peer failure, rank=$RDMX_RANK] hint: fix it\" >&2; sleep 0.2; exit 3"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(occurrences(r.err, "rdmx: it broke"), 1u) << r.err;
  EXPECT_NE(r.err.find("exited with status 3"), std::string::npos) << r.err;
  // The others fail the same way, unless they were stopped first: either is said, never repeated.
  EXPECT_TRUE(r.err.find("failed the same way") != std::string::npos ||
              r.err.find("stopping the other ranks") != std::string::npos)
      << r.err;
  // The program's own lines, alike or not, are every rank's to show.
  const CliResult d = run_cli({"run", "-n", "2", "--", "sh", "-c", "echo same >&2; echo \"rank $RDMX_RANK: $$\" >&2"});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_EQ(occurrences(d.err, "] same\n"), 2u) << d.err;
  EXPECT_EQ(occurrences(d.err, "] rank "), 2u) << d.err;
}

// The same through the library: a bad setting fails every rank of a real job alike.
TEST(RunCommand, ALibraryErrorOfEveryRankAppearsOnce) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"run", "-n", "2", "--", cli_path(), "perf", "p2p", "write_lat"},
                                             {"perf", "p2p", "write_lat"},
                                             {"perf", "coll", "all_reduce", "--np", "3", "--sizes", "8"}}) {
    const CliResult r = run_cli(args, {{"RDMX_TIMEOUT", "1e17"}}, std::chrono::seconds(60));
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(occurrences(r.err, "RDMX_TIMEOUT=\"1e17\" is out of range"), 1u) << r.err;
    EXPECT_EQ(r.err.find("-9223372036854775808"), std::string::npos) << r.err;
  }
}

TEST(RunCommand, AMissingProgramIsOneClearError) {
  const CliResult r = run_cli({"run", "-n", "2", "--", "/nonexistent/program"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot run \"/nonexistent/program\""), std::string::npos) << r.err;
  const CliResult p = run_cli({"run", "-n", "2", "--", "no-such-program-rdmx"});
  EXPECT_EQ(p.exit_code, 1);
  EXPECT_NE(p.err.find("not found in PATH"), std::string::npos) << p.err;
}

}  // namespace
}  // namespace rdmx::test
