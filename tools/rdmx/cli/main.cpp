// SPDX-License-Identifier: MIT
// rdmx: the command-line tool. Subcommands live one per file (commands.hpp).
#include <cstdio>
#include <exception>

#include "cli/commands.hpp"
#include "rdmx/error.hpp"
#include "rdmx/version.hpp"

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  CLI::App app{"rdmx: RDMA-style communication and collectives. Run 'rdmx <command> --help' for a command's options.",
               "rdmx"};
  rdmx::cli::set_invocation(argc, argv);
  // The library's version, the one bench reports carry (RDMX_VERSION_STRING is the headers').
  app.set_version_flag("--version", std::string("rdmx ") + rdmx::version(), "print the version and exit");
  app.require_subcommand(1);
  app.fallthrough(false);
  rdmx::cli::register_info(app);
  rdmx::cli::register_run(app);
  rdmx::cli::register_perf(app);
  rdmx::cli::register_bench(app);
  rdmx::cli::register_plan(app);
  rdmx::cli::register_status(app);
  rdmx::cli::register_doctor(app);
  rdmx::cli::require_decimal_numbers(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    return rdmx::cli::report_usage_error(app, e);
  } catch (const rdmx::cli::ExitStatus& e) {
    return e.status;
  } catch (const rdmx::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());  // what() begins "rdmx: "
    return e.code() == rdmx::ErrorCode::NotSupported ? rdmx::cli::kExitUnsupported : rdmx::cli::kExitError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rdmx: unexpected error: %s\n", e.what());
    return rdmx::cli::kExitError;
  }
  return 0;
}
