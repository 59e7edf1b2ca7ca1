// SPDX-License-Identifier: MIT
#include "plan/calibrate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/options.hpp"
#include "launch/local_job.hpp"
#include "plan/fabric.hpp"
#include "rdmx/bootstrap.hpp"
#include "rdmx/comm.hpp"
#include "rdmx/error.hpp"
#include "report/svg_plot.hpp"

namespace rdmx::cli {
namespace {

struct CalibrateOptions {
  std::string out = "fabric.json";
  std::string name = "measured";
  std::string description;
  double nic_gbit = 0;  // 0: the measured rate is the line rate
  std::string small = "8";
  std::string large = "4M,32M";
  int np = 0;
  double seconds = 0.5;  // per measurement
};

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Seconds per call of `op`, the same on every rank (rank 0's figure): every
// rank runs as many calls, sized from rank 0's first timing, in five
// batches. The median batch stands: a rank descheduled for a few ms (ranks
// outnumbering cores) inflates one batch's mean, not the figure.
template <typename Op>
double time_calls(Communicator& comm, double budget_s, Op op) {
  op();
  op();
  comm.barrier();
  double t0 = now_s();
  op();
  double one = now_s() - t0;
  comm.broadcast(&one, 1, DataType::Float64, 0);
  constexpr int kBatches = 5;
  const int per_batch = static_cast<int>(std::clamp(budget_s / kBatches / std::max(one, 1e-7), 1.0, 2000.0 / kBatches));
  std::vector<double> batches;
  for (int b = 0; b < kBatches; ++b) {
    comm.barrier();
    t0 = now_s();
    for (int i = 0; i < per_batch; ++i) op();
    batches.push_back((now_s() - t0) / per_batch);
  }
  std::nth_element(batches.begin(), batches.begin() + kBatches / 2, batches.end());
  double per = batches[kBatches / 2];
  comm.broadcast(&per, 1, DataType::Float64, 0);
  return per;
}

// all_reduce of `bytes` of float32 on `comm`, the seconds per call.
double all_reduce_seconds(Communicator& comm, std::size_t bytes, double budget_s) {
  std::vector<float> send(std::max<std::size_t>(bytes / 4, 1), 1.0f), recv(send.size());
  return time_calls(comm, budget_s,
                    [&] { comm.all_reduce(send.data(), recv.data(), send.size(), DataType::Float32, ReduceOp::Sum); });
}

// Bytes this core reduces per second: a float sum of two 16 MiB vectors,
// best of five (what a ring step's reduction costs each rank).
double reduce_rate() {
  std::vector<float> a(4 << 20, 1.0f), b(4 << 20, 2.0f);
  double best = 1e9;
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = now_s();
    for (std::size_t i = 0; i < a.size(); ++i) a[i] += b[i];
    best = std::min(best, now_s() - t0);
  }
  volatile float sink = a[a.size() / 2];
  (void)sink;
  return static_cast<double>(a.size() * sizeof(float)) / best;
}

std::string when() {
  char buf[64];
  const std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
  return buf;
}

struct Fit {
  double latency_s = 0;
  double bytes_per_s = 0;
  std::string how;
};

// A group of p ranks: the step latency from a small all_reduce by recursive
// doubling (ceil(log2 p) rounds) and the bandwidth from the ring's slope
// between two large sizes, less the reduction's share: the ring sends
// 2(p-1)/p of the data and reduces (p-1)/p of it.
Fit fit_group(Communicator& rd, Communicator& ring, std::size_t small, std::size_t lo, std::size_t hi, double gamma,
              double budget, const char* what) {
  const double p = ring.size();
  const double rounds = std::max(1.0, std::ceil(std::log2(p) - 1e-9));
  const double t_small = all_reduce_seconds(rd, small, budget);
  const double t_lo = all_reduce_seconds(ring, lo, budget);
  const double t_hi = all_reduce_seconds(ring, hi, budget);
  // Rank 0's times, broadcast, so every rank of the group refuses alike. A
  // larger size that took no longer is noise, and its slope a negative
  // bandwidth the profile's own check would refuse when read back.
  if (!(t_hi > t_lo)) {
    char sizes[160];
    std::snprintf(sizes, sizeof sizes, "ring all_reduce %s in %.3f ms, %s in %.3f ms",
                  format_bytes(static_cast<double>(lo)).c_str(), t_lo * 1e3,
                  format_bytes(static_cast<double>(hi)).c_str(), t_hi * 1e3);
    throw Error(ErrorCode::InvalidArgument,
                std::string("rdmx plan calibrate: ") + what + ": the larger size took no longer than the smaller, " +
                    "so the bandwidth cannot be fitted",
                {.op = "plan calibrate",
                 .sizes = sizes,
                 .hint = "give --large sizes further apart (e.g. 1M,16M) or more --seconds, on an idle machine"});
  }
  Fit f;
  f.latency_s = t_small / rounds;
  const double slope = (t_hi - t_lo) / static_cast<double>(hi - lo);
  f.bytes_per_s = 2 * (p - 1) / p / std::max(slope - (p - 1) / p / gamma, slope * 0.05);
  char how[512];
  std::snprintf(how, sizeof how,
                "all_reduce %s (%d ranks): %s by rd in %.1f us (%g rounds); ring %s in %.3f ms, %s in %.3f ms", what,
                ring.size(), format_bytes(static_cast<double>(small)).c_str(), t_small * 1e6, rounds,
                format_bytes(static_cast<double>(lo)).c_str(), t_lo * 1e3,
                format_bytes(static_cast<double>(hi)).c_str(), t_hi * 1e3);
  f.how = how;
  return f;
}

// --small and --large as sizes; bad ones end the command before any rank
// starts, as a usage error.
struct Sizes {
  std::size_t small = 0;
  std::vector<std::size_t> large;
};

Sizes parse_sizes(const CalibrateOptions& o) {
  try {
    Sizes s{parse_size(o.small, "--small"), parse_size_list(o.large, "--large")};
    if (s.large.size() != 2 || s.large[1] <= s.large[0]) {
      throw UsageError{"--large needs two sizes, the second larger"};
    }
    return s;
  } catch (const UsageError& e) {
    throw CLI::ValidationError("plan calibrate", e.message);
  }
}

void calibrate(const CalibrateOptions& o, const Sizes& sizes) {
  const std::size_t small = sizes.small;
  const auto& large = sizes.large;

  // One store, two communicators: one forced to recursive doubling (the
  // step latency), one to the ring (the bandwidth).
  const Bootstrap boot = rdmx::from_env();
  CommOptions options;
  options.algo = "all_reduce:rd";
  options.tag = "calibrate-rd";
  auto rd_world = Communicator::create(boot.store, boot.info.rank, boot.info.world_size, options);
  const int rank = rd_world->rank(), size = rd_world->size();
  const int per_node = rd_world->local_size();
  // Ranks numbered host by host, the same count on each (as rdmx run,
  // torchrun and Slurm number them): rank r is local rank r mod L.
  int contiguous = rd_world->local_rank() == rank % per_node && size % per_node == 0 ? 1 : 0;
  int all_contiguous = 0;
  rd_world->all_reduce(&contiguous, &all_contiguous, 1, DataType::Int32, ReduceOp::Min);
  if (all_contiguous == 0) {
    throw Error(ErrorCode::Config, "rdmx plan calibrate needs ranks numbered host by host, the same count per host",
                {.op = "plan calibrate", .rank = rank, .hint = "start it with rdmx run, torchrun, mpirun or Slurm"});
  }
  const int nodes = size / per_node;
  if (nodes < 2) {
    throw Error(ErrorCode::Config, "rdmx plan calibrate needs ranks on at least two hosts (found one host)",
                {.op = "plan calibrate",
                 .rank = rank,
                 .hint = "start it on two or more hosts (scripts/bed.sh run NAME 2x1 -- rdmx plan calibrate)"});
  }
  const double gamma = reduce_rate();
  const double budget = o.seconds;

  // Between nodes: one rank per node, recursive doubling then the ring.
  auto across_rd = rd_world->split(rd_world->local_rank() == 0 ? 0 : 1, rank);
  Fit across;
  {
    CommOptions ring_options;
    ring_options.algo = "all_reduce:ring";
    ring_options.tag = "calibrate-ring";
    auto ring_world = Communicator::create(boot.store, boot.info.rank, boot.info.world_size, ring_options);
    auto across_ring = ring_world->split(ring_world->local_rank() == 0 ? 0 : 1, rank);
    // Only the first local ranks measure across; the others wait at the
    // world barrier, so nothing else crosses the links meanwhile.
    if (rd_world->local_rank() == 0) {
      across =
          fit_group(*across_rd, *across_ring, small, large[0], large[1], gamma, budget, "across nodes, one rank each");
    }
    rd_world->barrier();
    // Inside each node at once (every node measures its own ranks).
    Fit inside;
    if (per_node > 1) {
      auto inside_ring = ring_world->split(rank / per_node, rank);
      auto inside_rd = rd_world->split(rank / per_node, rank);
      inside = fit_group(*inside_rd, *inside_ring, small, large[0], large[1], gamma, budget, "inside each node");
    }
    rd_world->barrier();
    if (rank != 0) return;

    plan::Fabric f;
    f.name = o.name;
    f.description = o.description.empty() ? "measured by rdmx plan calibrate on " + std::to_string(nodes) + " x " +
                                                std::to_string(per_node) + " ranks, " + when()
                                          : o.description;
    const double measured_gbit = across.bytes_per_s * 8 / 1e9;
    f.latency_us = across.latency_s * 1e6;
    f.nic_gbit = o.nic_gbit > 0 ? o.nic_gbit : measured_gbit;
    f.efficiency = o.nic_gbit > 0 ? std::min(1.0, measured_gbit / o.nic_gbit) : 1.0;
    f.nics_per_node = 1;
    f.gpudirect = true;
    f.staging_gb_s = across.bytes_per_s / 1e9;
    f.intra_latency_us = per_node > 1 ? inside.latency_s * 1e6 : 1;
    f.intra_gb_s = per_node > 1 ? inside.bytes_per_s / 1e9 : 10;
    f.reduce_gb_s = gamma / 1e9;
    const std::string at = "rdmx plan calibrate, " + when() + ": ";
    f.sources["latency_us"] = at + across.how + "; latency = the small time / rounds";
    f.sources["nic_gbit"] = at + (o.nic_gbit > 0 ? "given (--nic-gbit)" : "the measured rate between nodes");
    f.sources["efficiency"] = at + "the ring's slope between the two large sizes, less the reduction, as 2(p-1)/p B";
    f.sources["nics_per_node"] = "one: the measurement runs one rank per node across nodes";
    f.sources["gpudirect"] = "host memory: no staging";
    f.sources["intra_latency_us"] = per_node > 1 ? at + inside.how : "one rank per node: not measured";
    f.sources["intra_gb_s"] = f.sources["intra_latency_us"];
    f.sources["reduce_gb_s"] = at + "float32 sum of two 16 MiB vectors on rank 0, best of 5";
    nlohmann::json doc;
    doc["fabrics"][f.name] = plan::fabric_to_json(f);
    std::ofstream out(o.out, std::ios::trunc);
    out << doc.dump(2) << "\n";
    if (!out) {
      throw Error(ErrorCode::System, "cannot write the fabric profile to '" + o.out + "'",
                  {.op = "plan calibrate", .rank = rank, .hint = "check the directory exists and is writable"});
    }
    std::printf(
        "fabric %s: latency %.2f us, %.3f Gbit/s per node, inside a node %.2f us and %.2f GB/s, "
        "reduction %.2f GB/s\nwrote %s\n",
        f.name.c_str(), f.latency_us, measured_gbit, f.intra_latency_us, f.intra_gb_s, f.reduce_gb_s, o.out.c_str());
  }
}

}  // namespace

void register_plan_calibrate(CLI::App& plan) {
  auto o = std::make_shared<CalibrateOptions>();
  CLI::App* cal = plan.add_subcommand(
      "calibrate",
      "measure the fabric this job's ranks run on and write a fabric profile (run it as every rank of "
      "a job on two or more hosts, or with --np on one)");
  cal->add_option("--out", o->out, "the profile file to write")->capture_default_str();
  cal->add_option("--name", o->name, "the fabric's name in the file")->capture_default_str();
  cal->add_option("--description", o->description, "one line describing the fabric");
  cal->add_option("--nic-gbit", o->nic_gbit, "the NIC's line rate, Gbit/s (efficiency = measured / this)")
      ->check(CLI::Range(1e-3, 1e5));
  cal->add_option("--small", o->small, "the latency measurement's size")->capture_default_str();
  cal->add_option("--large", o->large, "the two sizes the bandwidth is fitted between")->capture_default_str();
  cal->add_option("--seconds", o->seconds, "time spent on each measurement")
      ->check(CLI::Range(0.01, 600.0))
      ->capture_default_str();
  cal->add_option("--np", o->np, "local ranks to start when no launcher started this")->check(CLI::Range(2, 4096));
  auto l = std::make_shared<CalibrateLogOptions>();
  cal->add_option(
      "--from-nccl-tests", l->log,
      "fit the profile to this nccl-tests output (all_reduce_perf, ...) or rdmx perf coll --json document instead of "
      "measuring; no rank runs");
  cal->add_option("--like", l->like, "with --from-nccl-tests: the profile whose other fields are kept")
      ->capture_default_str();
  cal->add_option("--fabric-file", l->fabric_file, "with --like: a profile file instead of the built-in ones");
  cal->add_option("--op", l->op, "with --from-nccl-tests: the collective, when the log does not say");
  cal->add_option("--nodes", l->nodes, "with --from-nccl-tests: nodes, when the log lists no ranks")
      ->check(CLI::Range(1, 1 << 20));
  cal->add_option("--gpus-per-node", l->gpus_per_node, "with --from-nccl-tests: GPUs per node, likewise")
      ->check(CLI::Range(1, 4096));
  cal->add_option("--nics", l->nics, "with --from-nccl-tests: NICs per node of the measured cluster")
      ->check(CLI::Range(1, 64));
  cal->add_option("--transport", l->transport, "with --from-nccl-tests: rdma or socket (NCCL's socket transport)")
      ->check(CLI::IsMember({"rdma", "socket"}));
  cal->add_option("--gpu", l->gpu, "with --from-nccl-tests: the GPU, when the log prints none");
  cal->add_option("--library", l->library, "with --from-nccl-tests: the library that ran (nccl, nccl-ring, rdmx)")
      ->check(CLI::IsMember({"rdmx", "nccl", "nccl-ring"}))
      ->capture_default_str();
  cal->callback([o, l] {
    if (!l->log.empty()) {
      l->out = o->out;
      l->name = o->name;
      l->description = o->description;
      l->nic_gbit = o->nic_gbit;
      return calibrate_from_log(*l);
    }
    const Sizes sizes = parse_sizes(*o);
    if (run_self_as_local_ranks(o->np > 0 ? o->np : 2, "rdmx plan calibrate")) return;
    calibrate(*o, sizes);
  });
}

}  // namespace rdmx::cli
