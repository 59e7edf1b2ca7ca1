// SPDX-License-Identifier: MIT
// rdmx bench: the main job. On local ranks, for every provider that works
// here: a short perftest-style sweep between two ranks and an nccl-tests-style
// all_reduce sweep; then a summary a person reads in ten seconds, the full
// results as JSON (docs/schemas/bench.schema.json) and an HTML report.
//
// Each step is `rdmx perf ...` run as a local job of this same executable, so
// the bench measures exactly what those commands print, and a step that fails
// is reported and skipped rather than ending the run.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "launch/local_job.hpp"
#include "rdmx/error.hpp"
#include "rdmx/info.hpp"
#include "rdmx/version.hpp"
#include "report/bench_summary.hpp"
#include "report/report_html.hpp"

namespace rdmx::cli {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct BenchOptions {
  int np = 0;
  bool quick = false;
  std::string out_dir = "rdmx-bench";
  std::vector<std::string> providers;  // empty: every usable one
  int step_limit_s = 300;
  std::uint64_t llc_bytes = 0;  // the host's last-level cache
};

// The latency tests and the out-of-cache WRITE bandwidth run in rounds, so
// that the summary can say when a figure moved between them (a busy host).
constexpr int kRounds = 3;

// One `rdmx perf` invocation of the bench.
struct Step {
  std::string provider;
  std::string kind;  // "p2p" or "coll"
  std::string what;  // shown in the progress bar and in errors
  int ranks = 2;
  std::vector<std::string> args;  // after "rdmx"
};

std::vector<Step> plan_steps(const BenchOptions& o, const std::vector<std::string>& providers) {
  const std::string lat_sizes = o.quick ? "2,64,4K" : "2,8,64,512,4K,32K,256K";
  const std::string bw_sizes = o.quick ? "4K,64K,1M" : "1K,4K,16K,64K,256K,1M,4M";
  const std::string volume = o.quick ? "32M" : "256M";
  std::vector<Step> steps;
  const std::string out_of_cache = std::to_string(out_of_cache_bytes(o.llc_bytes));
  for (const auto& p : providers) {
    for (int round = 1; round <= kRounds; ++round) {
      steps.push_back({p,
                       "p2p",
                       p + ": p2p latency (round " + std::to_string(round) + " of " + std::to_string(kRounds) + ")",
                       2,
                       {"perf", "p2p", "write_lat,read_lat,send_lat,atomic_lat", "--provider", p, "-s", lat_sizes, "-n",
                        o.quick ? "300" : "1000", "--json"}});
    }
    steps.push_back(
        {p,
         "p2p",
         p + ": p2p bandwidth",
         2,
         {"perf", "p2p", "write_bw,read_bw,send_bw", "--provider", p, "-s", bw_sizes, "--volume", volume, "--json"}});
    for (int round = 1; round <= kRounds; ++round) {
      steps.push_back({p,
                       "p2p",
                       p + ": write bandwidth beyond the cache (round " + std::to_string(round) + " of " +
                           std::to_string(kRounds) + ")",
                       2,
                       // Two untimed messages warm it: the default warm-up (one window, 128 WRs) would move 128
                       // messages of this size first, most of the step's time.
                       {"perf", "p2p", "write_bw", "--provider", p, "-s", out_of_cache, "-n", o.quick ? "8" : "16",
                        "--warmup", "2", "--json"}});
    }
    std::vector<std::string> coll = {"perf", "coll", "all_reduce", "--provider", p, "--json", "-c", "1"};
    if (o.quick) {
      coll.insert(coll.end(), {"--sizes", "8,4K,64K,1M"});
    } else {
      coll.insert(coll.end(), {"--sizes", "8,64,512,4K,32K,256K,1M,4M,16M,64M"});
    }
    steps.push_back({p, "coll", p + ": all_reduce sweep (" + std::to_string(o.np) + " ranks)", o.np, coll});
  }
  return steps;
}

// A one-line bar on stderr, redrawn in place; only on a terminal.
class ProgressBar {
 public:
  explicit ProgressBar(std::size_t total) : total_(total), enabled_(::isatty(STDERR_FILENO) != 0) {}
  void show(std::size_t done, const std::string& what) const {
    if (!enabled_) return;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * done / std::max<std::size_t>(total_, 1));
    std::fprintf(stderr, "\r\033[K[%.*s%.*s] %zu/%zu %s", filled, "##############################", kWidth - filled,
                 "..............................", done, total_, what.c_str());
    std::fflush(stderr);
  }
  void clear() const {
    if (enabled_) std::fprintf(stderr, "\r\033[K");
  }

 private:
  std::size_t total_;
  bool enabled_;
};

std::string iso_time_utc(std::time_t t) {
  char text[32];
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    throw Error(ErrorCode::System, "cannot write " + path.string(),
                {.op = "rdmx bench", .hint = "pick a writable --out directory"});
  }
}

int run_bench(const BenchOptions& o) {
  const auto started_wall = std::time(nullptr);
  const auto started = Clock::now();
  const HostTopology host = discover_topology();
  json doc = {{"schema", "rdmx.bench/1"},
              {"rdmx_version", rdmx::version()},
              {"started", iso_time_utc(started_wall)},
              {"duration_s", 0.0},
              {"host",
               {{"hostname", host.hostname},
                {"cores", host.cores},
                {"logical_cpus", host.logical_cpus},
                {"numa_nodes", host.numa_nodes.size()},
                {"llc_bytes", o.llc_bytes}}},
              {"ranks", o.np},
              {"quick", o.quick},
              {"providers", json::array()},
              {"p2p", json::array()},
              {"coll", json::array()},
              {"summary", json::array()},
              {"errors", json::array()}};

  std::vector<std::string> usable;
  for (const ProviderStatus& p : probe_providers()) {
    doc["providers"].push_back({{"name", p.name}, {"usable", p.usable}, {"reason", p.reason}, {"device", p.device}});
    const bool wanted =
        o.providers.empty() || std::find(o.providers.begin(), o.providers.end(), p.name) != o.providers.end();
    if (p.usable && wanted && p.caps.same_host_peers) usable.push_back(p.name);
  }
  for (const auto& name : o.providers) {
    if (std::find(usable.begin(), usable.end(), name) == usable.end()) {
      throw Error(ErrorCode::NotFound, "provider \"" + name + "\" cannot run local ranks here",
                  {.op = "rdmx bench", .hint = "rdmx info lists the providers and why each is or is not usable"});
    }
  }
  std::fprintf(
      stderr, "rdmx bench: providers %s; %d local ranks for all_reduce; results in %s/\n",
      [&] {
        std::string list;
        for (const auto& p : usable) list += (list.empty() ? "" : ", ") + p;
        return list.empty() ? std::string("(none usable)") : list;
      }()
          .c_str(),
      o.np, o.out_dir.c_str());

  const std::vector<Step> steps = plan_steps(o, usable);
  ProgressBar bar(steps.size());
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const Step& step = steps[i];
    bar.show(i, step.what);
    LocalJobOptions job;
    job.ranks = step.ranks;
    job.name = "rdmx bench";
    job.output = OutputMode::Capture;
    job.time_limit = std::chrono::seconds(o.step_limit_s);
    job.command.push_back(self_executable());
    job.command.insert(job.command.end(), step.args.begin(), step.args.end());
    const LocalJobResult result = run_local_job(job);
    json parsed;
    std::string problem;
    if (result.exit_code != 0) {
      problem = result.failure;
      for (const auto& line : result.failed_tail) problem += "\n  | " + line;
    } else {
      try {
        parsed = json::parse(result.rank0_stdout);
      } catch (const json::exception& e) {
        problem = std::string("its JSON output does not parse: ") + e.what();
      }
    }
    if (!problem.empty()) {
      doc["errors"].push_back({{"provider", step.provider}, {"what", step.what}, {"message", problem}});
      continue;
    }
    for (auto& run : parsed["runs"]) {
      if (step.kind == "p2p") {
        doc["p2p"].push_back({{"provider", step.provider}, {"test", run["test"]}, {"results", run["results"]}});
      } else {
        doc["coll"].push_back({{"provider", step.provider},
                               {"collective", run["collective"]},
                               {"np", run["np"]},
                               {"type", run["type"]},
                               {"redop", run["redop"]},
                               {"results", run["results"]}});
      }
    }
  }
  bar.show(steps.size(), "writing the report");
  doc["p2p"] = merge_rounds(doc["p2p"]);
  doc["summary"] = summarize(doc, usable);
  doc["duration_s"] = std::chrono::duration<double>(Clock::now() - started).count();

  std::filesystem::create_directories(o.out_dir);
  const std::filesystem::path json_path = std::filesystem::path(o.out_dir) / "results.json";
  const std::filesystem::path html_path = std::filesystem::path(o.out_dir) / "report.html";
  write_file(json_path, doc.dump(2) + "\n");
  write_file(html_path, render_html_report(doc));
  bar.clear();
  std::fputs(format_summary(doc).c_str(), stdout);
  std::printf("Full results: %s\nReport: %s (open it in a browser; it needs no network)\nTook %.0f s.\n",
              json_path.c_str(), html_path.c_str(), doc["duration_s"].get<double>());
  if (usable.empty()) {
    std::fprintf(stderr, "rdmx bench: no provider can run local ranks here (rdmx info says why)\n");
    return kExitError;
  }
  return doc["errors"].empty() ? kExitOk : kExitError;
}

}  // namespace

void register_bench(CLI::App& root) {
  auto* cmd = root.add_subcommand(
      "bench",
      "The main job: on local ranks, probe the providers, run a short p2p sweep and an all_reduce sweep on each, "
      "print a summary, and write results.json and report.html (self-contained) to --out.");
  auto o = std::make_shared<BenchOptions>();
  cmd->add_option("--np", o->np, "local ranks for all_reduce (default min(4, cores))")->check(CLI::Range(2, 64));
  cmd->add_flag("--quick", o->quick, "fewer sizes and iterations (about a quarter of the time)");
  cmd->add_option("--out", o->out_dir, "directory for results.json and report.html (default ./rdmx-bench)");
  cmd->add_option("--providers", o->providers, "only these providers, comma-separated (default: every usable one)")
      ->delimiter(',');
  cmd->add_option("--step-time-limit", o->step_limit_s, "seconds one step may take before it is stopped (default 300)")
      ->check(CLI::Range(1, 3600));
  cmd->callback([o] {
    if (o->np == 0) o->np = default_local_ranks();
    o->llc_bytes = last_level_cache_bytes();
    // Local ranks reach each other over loopback unless told otherwise.
    ::setenv("RDMX_SOCKET_IFNAME", "lo", 0);
    const int status = run_bench(*o);
    if (status != 0) throw ExitStatus{status};
  });
}

}  // namespace rdmx::cli
