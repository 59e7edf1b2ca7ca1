// SPDX-License-Identifier: MIT
// The examples a new user runs first (examples/), as `make example` runs them:
// through `rdmx run`, and started on their own by mistake.
#include <gtest/gtest.h>

#include <string>

#include "run_cli.hpp"

namespace rdmx::test {
namespace {

TEST(AllReduceExample, ThreeRanksUnderRdmxRunEachCheckTheSum) {
  const CliResult r =
      run_cli({"run", "-n", "3", "--time-limit", "60", "--", example_path("rdmx_all_reduce"), "100000"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string n = std::to_string(rank);
    // Ranks on one host reach each other over shm under auto selection.
    EXPECT_EQ(occurrences(r.out, "[" + n + "] rank " + n +
                                     " of 3: all_reduce (sum) of 100000 floats over shm: every "
                                     "element correct (element 0 = 6 = 1 + ... + 3)\n"),
              1u)
        << r.out;
  }
}

TEST(AllReduceExample, AWrongArgumentIsNamed) {
  const CliResult r = run_cli({"run", "-n", "2", "--time-limit", "60", "--", example_path("rdmx_all_reduce"), "x"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("bad count 'x'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("usage: rdmx_all_reduce [count]"), std::string::npos) << r.err;
}

// Started without a launcher, a program learns it should have been started by `rdmx run`.
TEST(AllReduceExample, StartedAloneSuggestsRdmxRun) {
  std::map<std::string, std::string> no_launcher;
  for (const char* name : {"RDMX_RANK", "RDMX_WORLD_SIZE", "RDMX_STORE", "RDMX_LOCAL_RANK", "RDMX_LOCAL_WORLD_SIZE",
                           "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_RANK",
                           "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS"}) {
    no_launcher[name] = "";  // removed from the child's environment
  }
  const std::string program = example_path("rdmx_all_reduce");
  const CliResult r = run_program({program}, no_launcher, std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("no launcher recognised"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rdmx run -n N -- CMD"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rdmx run -n 2 -- " + program), std::string::npos) << r.err;
  EXPECT_EQ(occurrences(r.err, "\n"), 1u) << "one line: " << r.err;
}

}  // namespace
}  // namespace rdmx::test
