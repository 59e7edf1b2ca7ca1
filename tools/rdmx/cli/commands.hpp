// SPDX-License-Identifier: MIT
// The rdmx command's subcommands. Each registers itself on the root app; its
// callback runs the command and reports failure by throwing (rdmx::Error or
// cli::ExitStatus), so main() owns every exit path.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace rdmx::cli {

// Exit statuses shared by every subcommand (documented in docs/TOOLS.md).
enum Exit : int {
  kExitOk = 0,
  kExitError = 1,        // an rdmx::Error or a failed rank
  kExitUsage = 2,        // bad arguments (CLI11 also uses non-zero codes here)
  kExitUnsupported = 3,  // a combination the library does not support
  kExitWrong = 4,        // perf coll -c 1 found wrong results
};

// Thrown by a subcommand to end with `status` after printing its own message.
struct ExitStatus {
  int status;
};

// The command line this process was started with (argv[1..]), for the
// subcommands that start local ranks of themselves, and this executable's path.
void set_invocation(int argc, char** argv);
const std::vector<std::string>& invocation_args();
std::string self_executable();

// Prints a usage error (the reason, the nearest valid word, where help is)
// and returns kExitUsage.
int report_usage_error(const CLI::App& root, const CLI::ParseError& e);

void register_info(CLI::App& root);
void register_run(CLI::App& root);
void register_perf(CLI::App& root);  // perf p2p, perf coll
void register_bench(CLI::App& root);
void register_status(CLI::App& root);  // status of a running job
void register_doctor(CLI::App& root);  // what a job needs of its hosts
void register_plan(CLI::App& root);    // plan, plan fabrics|models|collective|calibrate

// Refuses, on every numeric option of `app` and its subcommands, a value not
// written in decimal ("0x10", "010", "nan", "inf"), as a usage error.
void require_decimal_numbers(CLI::App& app);

}  // namespace rdmx::cli
