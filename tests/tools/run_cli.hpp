// SPDX-License-Identifier: MIT
// Runs the real `rdmx` binary as a child process and captures what it did.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "support/text.hpp"  // contains, occurrences: what the tests ask of the output

namespace rdmx::test {

struct CliResult {
  int exit_code = -1;  // exit status, or 128 + signal number
  std::string out;     // stdout
  std::string err;     // stderr
};

// Runs `rdmx args...` with `env` added to (or, with an empty value, removed
// from) this process's environment. Killed (SIGKILL, exit 137) past `limit`.
// A `denied_syscall` (>= 0) fails with EPERM in the child (support/deny_syscall.hpp).
CliResult run_cli(const std::vector<std::string>& args, const std::map<std::string, std::string>& env = {},
                  std::chrono::seconds limit = std::chrono::seconds(120), long denied_syscall = -1);

// Runs any program the same way: argv[0] is its path.
CliResult run_program(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {},
                      std::chrono::seconds limit = std::chrono::seconds(120), long denied_syscall = -1);

// The path of the rdmx binary under test, of an example built beside it
// ("rdmx_all_reduce"), and of the source tree (docs/schemas).
const char* cli_path();
std::string example_path(const std::string& name);
std::string source_path(const std::string& relative);
// Writes `text` to the test's temporary directory as `name`; its path.
std::string write_temp_file(const std::string& name, const std::string& text);

}  // namespace rdmx::test
