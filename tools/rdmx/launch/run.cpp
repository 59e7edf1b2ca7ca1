// SPDX-License-Identifier: MIT
// rdmx run -n N [--provider P] -- CMD ...: N local ranks of CMD, as mpirun -np
// or torchrun --nproc-per-node would start them, for any rdmx program.
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "launch/local_job.hpp"
#include "rdmx/comm.hpp"

namespace rdmx::cli {

void register_run(CLI::App& root) {
  auto* cmd = root.add_subcommand(
      "run",
      "Start N local ranks of a command with RDMX_RANK, RDMX_WORLD_SIZE, RDMX_LOCAL_RANK and a shared store "
      "(RDMX_STORE) set; prefix each output line with its rank; when one rank fails, stop the others and report "
      "which rank failed, how, and its last lines. The exit status is the failed rank's (128+signal when killed).");
  struct Args {
    int ranks = 2;
    std::string provider;
    int time_limit = 0;
    std::size_t tail = 10;
    bool doctor = false;
    std::vector<std::string> command;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("-n,--np", args->ranks, "number of local ranks")->required()->check(CLI::Range(1, 1024));
  cmd->add_option("--provider", args->provider, "sets RDMX_PROVIDER for every rank (shm, tcp, auto)")
      ->check(provider_names());
  cmd->add_option("--time-limit", args->time_limit, "stop the job after this many seconds (0: no limit; exit 124)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--tail", args->tail, "lines of a failed rank's output to repeat in the report")
      ->check(CLI::Range(0, 1000));
  cmd->add_flag("--doctor", args->doctor,
                "first run `rdmx doctor` as the job's ranks, and start the command only when it finds no problem");
  cmd->add_option("command", args->command, "the program and its arguments (after --)")->required();
  cmd->callback([args] {
    LocalJobOptions options;
    options.ranks = args->ranks;
    options.command = args->command;
    if (!args->provider.empty()) options.env["RDMX_PROVIDER"] = args->provider;
    options.time_limit = std::chrono::seconds(args->time_limit);
    options.tail_lines = args->tail;
    // The check every rank's Communicator::create makes, once, before 64
    // ranks each fail with it (or a program without one fits anyway: off).
    require_comm_memory_fits(comm_memory(args->ranks, args->ranks), "rdmx run -n " + std::to_string(args->ranks));
    if (args->doctor) {
      LocalJobOptions check = options;
      check.command = {self_executable(), "doctor"};
      check.name = "rdmx run --doctor";
      const LocalJobResult checked = run_local_job(check);
      if (checked.exit_code != 0) {
        std::fprintf(stderr, "rdmx run: rdmx doctor found a problem (above); %s not started\n",
                     args->command.front().c_str());
        throw ExitStatus{checked.exit_code};
      }
    }
    const LocalJobResult result = run_local_job(options);
    if (result.exit_code != 0) throw ExitStatus{result.exit_code};
  });
}

}  // namespace rdmx::cli
