// SPDX-License-Identifier: MIT
// rdmx status: a running job seen through its store, from any host that
// reaches it. It reads what the ranks publish (rdmx/status.hpp) and
// nothing else, so the job neither waits for it nor notices it.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>
#include <thread>

#include "cli/commands.hpp"
#include "rdmx/bootstrap.hpp"
#include "rdmx/error.hpp"
#include "rdmx/status.hpp"

namespace rdmx::cli {
namespace {

struct StatusOptions {
  std::string store;
  bool json = false;
  double watch = 0;  // seconds between views; 0: one view
  int count = 0;     // views in --watch mode; 0: until interrupted
  double timeout = 5;
};

std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string store_address(const StatusOptions& options) {
  if (!options.store.empty()) return options.store;
  if (const char* env = std::getenv("RDMX_STORE"); env != nullptr && *env != '\0') return env;
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  if (addr != nullptr && port != nullptr && *addr != '\0' && *port != '\0') return std::string(addr) + ":" + port;
  throw Error(ErrorCode::InvalidArgument, "rdmx status: which job? no --store, and RDMX_STORE is unset",
              {.op = "status", .hint = "give the job's store: rdmx status --store host:port (or file:/dir)"});
}

std::unique_ptr<Store> open_job_store(const std::string& address, double timeout_s) {
  try {
    return open_store(address, std::chrono::milliseconds(static_cast<long long>(timeout_s * 1e3)));
  } catch (const Error& e) {
    // The two reasons people meet: the job's secret, and a torch job's store.
    throw Error(e.code(), std::string("rdmx status: cannot read the store at ") + address + ": " + e.what(),
                {.op = "status",
                 .peer_addr = address,
                 .hint = "with authentication on, export the job's RDMX_AUTH_KEY (or RDMX_AUTH_KEY_FILE) first; a "
                         "torch job's store (MASTER_ADDR:MASTER_PORT) speaks torch's protocol: read it with "
                         "`python -m rdmx status host:port`"});
  }
}

void print_view(Store& store, const StatusOptions& options, int view) {
  const std::string doc = job_status_json(read_status_records(store), unix_ms());
  if (options.json) {
    std::printf("%s\n", doc.c_str());
  } else {
    if (options.watch > 0) {
      const std::time_t now = std::time(nullptr);
      char when[32];
      std::strftime(when, sizeof(when), "%H:%M:%S", std::localtime(&now));
      std::printf("%s== %s (view %d, every %g s) ==\n", view > 1 ? "\n" : "", when, view, options.watch);
    }
    std::fputs(describe_job_status(doc).c_str(), stdout);
  }
  std::fflush(stdout);
}

void run_status(const StatusOptions& options) {
  const std::string address = store_address(options);
  std::unique_ptr<Store> store = open_job_store(address, options.timeout);
  for (int view = 1;; ++view) {
    print_view(*store, options, view);
    if (options.watch <= 0 || (options.count > 0 && view >= options.count)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<long long>(options.watch * 1e3)));
  }
}

}  // namespace

void register_status(CLI::App& root) {
  auto options = std::make_shared<StatusOptions>();
  CLI::App* cmd = root.add_subcommand(
      "status",
      "A running job from its store: each communicator's ranks, their hosts and devices, the collective under way "
      "and who has not called it, seconds since each rank's progress and where it is, the slowest rank of the last "
      "collectives");
  cmd->add_option("--store", options->store,
                  "the job's store: host:port or file:/dir, as its RDMX_STORE (default: RDMX_STORE, else "
                  "MASTER_ADDR:MASTER_PORT)");
  cmd->add_flag("--json", options->json, "print one JSON document per view (docs/schemas/status.schema.json)");
  cmd->add_option("--watch", options->watch, "print a view every this many seconds until interrupted")
      ->check(CLI::Range(0.2, 3600.0));
  cmd->add_option("--count", options->count, "with --watch: stop after this many views")->check(CLI::Range(1, 1000000));
  cmd->add_option("--timeout", options->timeout, "seconds to reach the store")->check(CLI::Range(0.1, 600.0));
  cmd->callback([options] { run_status(*options); });
}

}  // namespace rdmx::cli
