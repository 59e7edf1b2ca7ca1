// SPDX-License-Identifier: MIT
// rdmx perf scale: what one communicator of N ranks costs: how long its
// creation takes once the last rank has arrived, how many connections and
// store requests each rank makes, how much memory each rank gives it, and a
// small and a large all_reduce on it. bench/scale/run.sh runs it at growing N
// and fits the model that extrapolates to tens of thousands of ranks.
//
// Store requests are counted on each rank's own client (a wrapper around
// the store it was given), so they are the same figure for a TCP store and a
// file store: what the store would serve.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/options.hpp"
#include "launch/local_job.hpp"
#include "perf/coll_memory.hpp"
#include "rdmx/bootstrap.hpp"
#include "rdmx/comm.hpp"
#include "rdmx/version.hpp"
#include "report/bench_summary.hpp"

namespace rdmx::cli::perf_scale {
namespace {

using nlohmann::json;

struct ScaleOptions {
  int np = 0;
  std::string provider;
  std::string sizes_text = "4,64M";
  int iters = 0;  // 0: 200 for sizes up to 64 KiB, 3 above
  bool json = false;
};

// Forwards to the store the rank was given and counts what it asks.
class CountingStore final : public Store {
 public:
  explicit CountingStore(std::shared_ptr<Store> inner) : inner_(std::move(inner)) {}
  std::uint64_t requests() const noexcept { return requests_.load(std::memory_order_relaxed); }
  // Bytes of the values the store answered gets with.
  std::uint64_t bytes_read() const noexcept { return bytes_read_.load(std::memory_order_relaxed); }

  void set(const std::string& key, const Bytes& value) override {
    count();
    inner_->set(key, value);
  }
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override {
    count();
    Bytes value = inner_->get(key, timeout);
    bytes_read_.fetch_add(value.size(), std::memory_order_relaxed);
    return value;
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    count();
    inner_->wait(keys, timeout);
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    count();
    return inner_->add(key, delta);
  }
  bool remove(const std::string& key) override {
    count();
    return inner_->remove(key);
  }
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    count();
    return inner_->compare_set(key, expected, desired);
  }
  bool check(const std::string& key) override {
    count();
    return inner_->check(key);
  }
  StoreStats stats() override {
    count();
    return inner_->stats();
  }
  std::vector<std::string> keys(const std::string& prefix) override {
    count();
    return inner_->keys(prefix);
  }

 private:
  void count() noexcept { requests_.fetch_add(1, std::memory_order_relaxed); }
  std::shared_ptr<Store> inner_;
  std::atomic<std::uint64_t> requests_{0};
  std::atomic<std::uint64_t> bytes_read_{0};
};

// Proportional set size: shared pages (the peers' mapped regions) count
// once over the processes that map them, so the ranks' figures add up.
double pss_bytes() {
  std::ifstream in("/proc/self/smaps_rollup");
  for (std::string line; std::getline(in, line);) {
    unsigned long long kb = 0;
    if (std::sscanf(line.c_str(), "Pss: %llu kB", &kb) == 1) return static_cast<double>(kb) * 1024.0;
  }
  return 0;
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::vector<double> reduced(Communicator& comm, std::vector<double> values, ReduceOp op) {
  comm.all_reduce(values.data(), values.data(), values.size(), DataType::Float64, op);
  return values;
}

// Seconds per call of an all_reduce of `bytes` (fp32), the slowest rank's.
double time_all_reduce(Communicator& comm, std::size_t bytes, int iters) {
  const std::size_t count = std::max<std::size_t>(bytes / 4, 1);
  std::vector<float> send(count, 1.0f), recv(count);
  const int warmup = std::max(1, iters / 10);
  for (int i = 0; i < warmup; ++i) comm.all_reduce(send.data(), recv.data(), count, DataType::Float32, ReduceOp::Sum);
  if (recv[0] != static_cast<float>(comm.size()) || recv[count - 1] != static_cast<float>(comm.size())) {
    throw Error(ErrorCode::InvalidState,
                "perf scale: all_reduce of " + std::to_string(bytes) + " B gave " + std::to_string(recv[0]) + ", not " +
                    std::to_string(comm.size()),
                {.op = "perf scale", .rank = comm.rank(), .hint = "a wrong sum is a bug in rdmx: report it"});
  }
  comm.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) comm.all_reduce(send.data(), recv.data(), count, DataType::Float32, ReduceOp::Sum);
  const double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
  return reduced(comm, {mine}, ReduceOp::Max)[0];
}

// The distinct providers this rank reaches its peers with.
std::vector<std::string> providers_used(const Communicator& comm) {
  std::vector<std::string> out;
  for (const std::string& p : comm.peer_providers()) {
    if (!p.empty() && std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  }
  return out;
}

std::string mib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", bytes / (1024.0 * 1024.0));
  return text;
}

void run_scale(const ScaleOptions& o, const std::vector<std::size_t>& sizes) {
  Bootstrap joined = rdmx::from_env();
  auto counting = std::make_shared<CountingStore>(joined.store);
  const int rank = joined.info.rank;
  const int size = joined.info.world_size;
  const double pss_before = pss_bytes();
  const double start = wall_seconds();
  std::unique_ptr<Communicator> comm = Communicator::create(counting, rank, size);
  const double end = wall_seconds();
  const double create_requests = static_cast<double>(counting->requests());
  const double create_bytes = static_cast<double>(counting->bytes_read());
  const double pss_created = pss_bytes() - pss_before;
  double connections = 0;
  for (const std::string& p : comm->peer_providers()) connections += p.empty() ? 0 : 1;

  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const auto host_id = static_cast<std::uint64_t>(std::hash<std::string>{}(host));
  std::vector<std::uint64_t> hosts(static_cast<std::size_t>(size));
  comm->all_gather(&host_id, hosts.data(), 1, DataType::Uint64);
  std::sort(hosts.begin(), hosts.end());
  const auto host_count = std::unique(hosts.begin(), hosts.end()) - hosts.begin();

  json calls = json::array();
  for (std::size_t bytes : sizes) {
    const int iters = o.iters > 0 ? o.iters : (bytes <= 65536 ? 200 : 3);
    const double seconds = time_all_reduce(*comm, bytes, iters);
    const double algbw = static_cast<double>(bytes) / seconds / 1e9;
    calls.push_back({{"bytes", bytes},
                     {"iters", iters},
                     {"time_us", seconds * 1e6},
                     {"algbw_GBps", algbw},
                     {"busbw_GBps", algbw * 2.0 * (size - 1) / size}});
  }
  const double pss_used = pss_bytes() - pss_before;
  const double all_requests = static_cast<double>(counting->requests());

  const auto hi =
      reduced(*comm, {start, end, end - start, connections, create_requests, pss_created, pss_used}, ReduceOp::Max);
  const auto lo = reduced(*comm, {-start, -connections}, ReduceOp::Max);
  const auto sum = reduced(*comm, {create_requests, all_requests, pss_used, create_bytes}, ReduceOp::Sum);
  const int local_ranks = joined.info.local_world_size > 0 ? joined.info.local_world_size : size;
  const CommMemory model = comm_memory(size, local_ranks);
  if (rank != 0) return;

  const double first_start = -lo[0];
  json doc{
      {"schema", "rdmx.perf_scale/1"},
      {"rdmx_version", rdmx::version()},
      {"np", size},
      {"hosts", host_count},
      {"local_ranks", local_ranks},
      {"providers", providers_used(*comm)},
      {"create",
       {{"seconds", hi[1] - hi[0]}, {"seconds_from_first_rank", hi[1] - first_start}, {"slowest_rank_seconds", hi[2]}}},
      {"connections_per_rank", {{"min", -lo[1]}, {"max", hi[3]}}},
      {"store_requests",
       {{"create_total", sum[0]},
        {"create_per_rank_max", hi[4]},
        {"total_with_collectives", sum[1]},
        {"create_bytes_read_total", sum[3]}}},
      {"memory_per_rank",
       {{"pss_after_create_max", hi[5]},
        {"pss_after_collectives_max", hi[6]},
        {"pss_after_collectives_mean", sum[2] / size},
        {"model_bytes", model.per_rank}}},
      {"all_reduce", calls}};
  if (o.json) {
    std::printf("%s\n", doc.dump(2).c_str());
    return;
  }
  std::string providers;
  for (const json& p : doc["providers"]) providers += (providers.empty() ? "" : ", ") + p.get<std::string>();
  std::printf("# rdmx perf scale: %d ranks on %lld host(s), rank 0 reaches its peers over %s\n", size,
              static_cast<long long>(host_count), providers.empty() ? "nothing" : providers.c_str());
  std::printf("# creation: %.3f s after the last rank arrived (%.3f s from the first); %.2f ms per rank\n",
              hi[1] - hi[0], hi[1] - first_start, (hi[1] - hi[0]) * 1e3 / size);
  std::printf(
      "# connections per rank: %g..%g; store requests while creating: %g in all, %g per rank at most; %.0f KB read\n",
      -lo[1], hi[3], sum[0], hi[4], sum[3] / 1e3);
  std::printf("# memory per rank (Pss): %s after creation, %s after the collectives (mean %s); the model: %s\n",
              mib(hi[5]).c_str(), mib(hi[6]).c_str(), mib(sum[2] / size).c_str(),
              mib(static_cast<double>(model.per_rank)).c_str());
  for (const json& c : calls) {
    std::printf("# all_reduce %7s: %12.2f us per call, busbw %.3f GB/s (%d calls)\n",
                human_bytes(c["bytes"].get<std::uint64_t>()).c_str(), c["time_us"].get<double>(),
                c["busbw_GBps"].get<double>(), c["iters"].get<int>());
  }
}

}  // namespace
}  // namespace rdmx::cli::perf_scale

namespace rdmx::cli {

void register_perf_scale(CLI::App& perf) {
  using namespace perf_scale;
  auto o = std::make_shared<ScaleOptions>();
  CLI::App* cmd = perf.add_subcommand(
      "scale",
      "what one communicator of N ranks costs: creation time after the last rank arrives, connections and store "
      "requests per rank, memory per rank, and all_reduce at a small and a large size (bench/scale/run.sh sweeps N)");
  cmd->add_option("--np", o->np, "local ranks to start when no launcher started this (default 4)")
      ->check(CLI::Range(1, 65536));
  cmd->add_option("--provider", o->provider, "sets RDMX_PROVIDER: shm, verbs, tcp or auto")->check(provider_names());
  cmd->add_option("--sizes", o->sizes_text, "all_reduce sizes, comma-separated (default 4,64M)");
  cmd->add_option("-n,--iters", o->iters, "calls per size (default 200 up to 64K, 3 above)")
      ->check(CLI::Range(1, 100000));
  cmd->add_flag("--json", o->json, "print one JSON document (docs/schemas/perf_scale.schema.json)");
  cmd->callback([o] {
    std::vector<std::size_t> sizes;
    try {
      sizes = parse_size_list(o->sizes_text, "--sizes");
    } catch (const UsageError& e) {
      throw CLI::ValidationError("perf scale", e.message);
    }
    if (!o->provider.empty()) ::setenv("RDMX_PROVIDER", o->provider.c_str(), 1);
    const int np = o->np > 0 ? o->np : 4;
    std::size_t largest = 0;
    for (std::size_t s : sizes) largest = std::max(largest, s);
    if (!launcher_present()) refuse_local_ranks_beyond_memory(np, 2, 2 * largest, "perf scale");
    if (run_self_as_local_ranks(np, "rdmx perf scale")) return;
    run_scale(*o, sizes);
  });
}

}  // namespace rdmx::cli
