// SPDX-License-Identifier: MIT
// rdmx perf: the benchmarks people know, on every provider: p2p (perftest)
// and coll (nccl-tests).
#include "commands.hpp"

namespace rdmx::cli {

void register_perf_p2p(CLI::App& perf);
void register_perf_coll(CLI::App& perf);

void register_perf(CLI::App& root) {
  auto* perf = root.add_subcommand("perf", "benchmarks: p2p (perftest-style) and coll (nccl-tests-style)");
  perf->require_subcommand(1);
  register_perf_p2p(*perf);
  register_perf_coll(*perf);
}

}  // namespace rdmx::cli
