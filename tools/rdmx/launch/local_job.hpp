// SPDX-License-Identifier: MIT
// Local ranks: N processes of one command on this host, sharing a store,
// watched as one job. Used by `rdmx run`, by `rdmx perf` when no launcher
// started it, and by `rdmx bench`.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace rdmx::cli {

enum class OutputMode {
  // Every line of every rank, prefixed "[rank] " (stdout to stdout, stderr to stderr).
  PrefixAll,
  // Rank 0's stdout passes through untouched, so `--json` output stays
  // parseable; everything else goes to stderr, prefixed.
  Rank0Plain,
  // Nothing is printed; rank 0's stdout is returned (LocalJobResult::rank0_stdout)
  // and every rank's last lines are kept for the failure report.
  Capture,
};

struct LocalJobOptions {
  int ranks = 2;
  std::vector<std::string> command;        // argv; command[0] is looked up in PATH
  std::map<std::string, std::string> env;  // added to each rank's environment
  OutputMode output = OutputMode::PrefixAll;
  std::chrono::seconds time_limit{0};  // 0: no limit
  std::size_t tail_lines = 10;         // lines kept per rank for the report
  std::string name = "rdmx run";       // how messages introduce themselves
};

struct LocalJobResult {
  // 0 when every rank exited 0; else the first failing rank's status (exit
  // code, or 128 + signal), or 124 when the time limit ended the job.
  int exit_code = 0;
  int failed_rank = -1;
  std::string failure;                   // one line: which rank, how; empty on success
  std::vector<std::string> failed_tail;  // that rank's last lines
  double seconds = 0;
  std::string rank0_stdout;  // OutputMode::Capture only
};

// Runs the job to the end. When a rank fails, the others get SIGTERM, then
// SIGKILL two seconds later; the report (rank, pid, how it ended, its last
// lines) goes to stderr unless the output is Capture. SIGINT and SIGTERM sent
// to this process are passed on to the ranks.
LocalJobResult run_local_job(const LocalJobOptions& options);

// The number of ranks `rdmx bench` and `rdmx perf coll` start by default: min(4, cores).
int default_local_ranks();

}  // namespace rdmx::cli

namespace rdmx::cli {

// For subcommands that need several ranks (perf p2p, perf coll): when no
// launcher started this process, runs this same command line as `ranks` local
// ranks (rank 0's stdout untouched) and returns true: the caller is done, and
// a failed job ends the command with the failed rank's status (ExitStatus).
// Returns false when a launcher did start it: the caller runs as its rank.
bool run_self_as_local_ranks(int ranks, const std::string& name);

}  // namespace rdmx::cli
