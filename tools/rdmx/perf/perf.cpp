// SPDX-License-Identifier: MIT
// rdmx perf: the benchmarks people know, on every provider: p2p (perftest)
// and coll (nccl-tests); gpu-copy, the GPU's own copy rate beside them; and
// fabric, every link between the job's hosts; scale, what a communicator of N ranks costs.
#include "cli/commands.hpp"

namespace rdmx::cli {

void register_perf_p2p(CLI::App& perf);
void register_perf_coll(CLI::App& perf);
void register_perf_gpu_copy(CLI::App& perf);
void register_perf_fabric(CLI::App& perf);
void register_perf_scale(CLI::App& perf);

void register_perf(CLI::App& root) {
  auto* perf = root.add_subcommand(
      "perf",
      "benchmarks: p2p (perftest-style), coll (nccl-tests-style), gpu-copy (the GPU's copy rate), fabric (every "
      "link between hosts) and scale (what a communicator of N ranks costs)");
  perf->require_subcommand(1);
  register_perf_p2p(*perf);
  register_perf_coll(*perf);
  register_perf_gpu_copy(*perf);
  register_perf_fabric(*perf);
  register_perf_scale(*perf);
}

}  // namespace rdmx::cli
