// SPDX-License-Identifier: MIT
// rdmx perf coll: rdmx's collectives measured as nccl-tests measures NCCL's,
// with nccl-tests' flags, columns and bus-bandwidth factors. Only the public
// API (rdmx/comm.hpp) is used.
//
// - Size: bytes per rank as in nccl-tests: the buffer for all_reduce, broadcast
//   and reduce; the receive buffer in total for all_gather and gather (each rank
//   sends size/type/np elements); the send buffer in total for reduce_scatter
//   and scatter; the whole send (= receive) buffer for all_to_all. The "count"
//   column is the count passed to the call, and "size" the larger of send and
//   receive bytes.
// - Bandwidth: algbw = size / time (GB = 1e9 bytes); busbw = algbw x factor,
//   nccl-tests' factors: all_reduce 2(n-1)/n; all_gather, reduce_scatter,
//   all_to_all, gather and scatter (n-1)/n; broadcast and reduce 1.
// - Timing: a barrier, then `iters` back-to-back calls; each rank's time per
//   call, averaged over the ranks (nccl-tests' default -a 1). Iterations: -n,
//   or per size from a calibration: 5 untimed calls, a barrier, 3 timed calls;
//   iters = 0.2 s / (rank 0's time per call), at least 5, at most 10000, rank
//   0's choice broadcast. Warm-up: before the sweep, as nccl-tests, -w calls
//   (default 5) at the largest and the smallest size, the largest run until
//   64 MiB per rank have moved (at most 200 calls); then before each row -w,
//   or max(5, iters / 10), untimed calls. The sweep's very first call is
//   timed and printed as "First call" beside its row's steady state.
// - Out-of-place and in-place rows, as nccl-tests. In place: all_reduce, reduce
//   and all_to_all pass the same buffer twice; reduce_scatter passes recv =
//   send + rank * count (nccl-tests); all_gather and gather pass send = recv +
//   rank * count; scatter passes recv = send + rank * count. broadcast is in
//   place only and barrier has no buffer: their other column is n/a.
// - Check (-c 1, after the timed calls of each row): inputs get small integers
//   that depend on rank and index, outputs a sentinel, one call, then every
//   output element is compared with the result computed here; #wrong is the
//   number of wrong elements summed over the ranks. Reductions use
//   ((rank+1)*(i%7+1)) % 16 (prod: 1 + that % 2, so products stay exact), data
//   movement (rank*17 + (i%101)*5 + 3) % 101: every result is exact in every
//   type (avg, floating types only, is compared to within one rounding).
//
// The collectives and their buffers are in perf_coll_model.cpp, one sweep's
// benchmark in perf_coll_bench.cpp; here, the command line and the sweeps.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cli/commands.hpp"
#include "launch/local_job.hpp"
#include "perf/coll_memory.hpp"
#include "perf/perf_coll.hpp"
#include "rdmx/bootstrap.hpp"
#include "rdmx/error.hpp"

namespace rdmx::cli {
namespace {

using namespace perf_coll;

// What the command line asked for, before it is split into sweeps.
struct Request {
  std::vector<std::string> ops;
  std::string min_bytes = "8";
  std::string max_bytes = "64M";
  double step_factor = 2;
  std::string step_bytes;
  std::string sizes;
  long iters = 0;
  long warmup = -1;
  int check = 1;
  std::string redop = "sum";
  std::string type = "float";
  int root = 0;
  int np = 0;
  std::string provider;
  std::string memory = "host";
  int gpu = -1;
  bool json = false;
  std::string json_lines;
};

template <std::size_t N>
std::vector<int> lookup(const char* const (&names)[N], const char* const (&aliases)[N], const std::string& value,
                        const std::string& option) {
  std::vector<int> found;
  for (std::size_t i = 0; i < N; ++i) {
    if (value == "all" || value == names[i] || (*aliases[i] != '\0' && value == aliases[i])) {
      found.push_back(static_cast<int>(i));
    }
  }
  if (found.empty()) {
    std::string known;
    for (const char* name : names) known += std::string(known.empty() ? "" : ", ") + name;
    throw UsageError{option + ": unknown '" + value + "' (known: " + known + ", all)"};
  }
  return found;
}

std::string format_factor(double factor) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", factor);
  return text;
}

std::vector<std::size_t> sweep_sizes(const Request& r) {
  if (!r.sizes.empty()) return parse_size_list(r.sizes, "--sizes");
  const std::size_t low = parse_size(r.min_bytes, "-b");
  const std::size_t high = parse_size(r.max_bytes, "-e");
  if (high < low) throw UsageError{"-e " + r.max_bytes + " is below -b " + r.min_bytes};
  std::vector<std::size_t> sizes;
  if (!r.step_bytes.empty()) {
    const std::size_t step = parse_size(r.step_bytes, "-i");
    if (step == 0) throw UsageError{"-i must be positive"};
    for (std::size_t size = low; size <= high; size += step) sizes.push_back(size);
  } else {
    // NaN compares false with everything: checked as "not above 1" it would pass, and the sweep stop at -b.
    if (!std::isfinite(r.step_factor) || !(r.step_factor > 1)) {
      throw UsageError{"-f " + format_factor(r.step_factor) +
                       ": the step factor must be a finite number above 1 (e.g. 2; or give -i STEPBYTES)"};
    }
    for (double size = static_cast<double>(low); size <= static_cast<double>(high); size *= r.step_factor) {
      // A factor near 1 repeats a size (8 * 1.01 is 8 bytes again): each size is measured once.
      if (!sizes.empty() && sizes.back() == static_cast<std::size_t>(size)) continue;
      sizes.push_back(static_cast<std::size_t>(size));
      if (low == high || size == 0) break;
    }
  }
  return sizes;
}

// Every (collective, type, reduction) the request names, as sweeps. Pairs the
// library does not define (avg on integers, reductions on barrier) are left
// out when "all" asked for them, and an error when named.
std::vector<Options> plan(const Request& r) {
  const std::vector<std::size_t> sizes = sweep_sizes(r);
  std::vector<int> ops;
  for (const auto& name : r.ops) {
    for (int op : lookup(kOpNames, kOpAliases, name, "collective")) {
      if (std::find(ops.begin(), ops.end(), op) == ops.end()) ops.push_back(op);
    }
  }
  const std::vector<int> types = lookup(kTypeNames, kTypeAliases, r.type, "-d");
  const char* const no_aliases[] = {"", "", "", "", ""};
  const std::vector<int> redops = lookup(kRedopNames, no_aliases, r.redop, "-o");
  std::vector<Options> sweeps;
  for (int op : ops) {
    for (int type : types) {
      for (int redop : redops) {
        Options o;
        o.op = static_cast<Op>(op);
        o.sizes = sizes;
        o.type = type;
        o.redop = redop;
        o.root = r.root;
        o.iters = r.iters;
        o.warmup = r.warmup;
        o.check = r.check != 0;
        const bool reduction = is_reduction(o.op);
        if (!reduction && redop != redops.front()) continue;  // the reduction does not apply: one sweep
        if (o.op == Op::Barrier && type != types.front()) continue;
        if (reduction && redop == kAvg && !is_floating_type(type)) {
          if (r.redop == "all" || r.type == "all") continue;
          throw UsageError{std::string("-o avg is for floating types (half, bfloat16, float, double), not ") +
                           kTypeNames[type]};
        }
        sweeps.push_back(o);
      }
    }
  }
  return sweeps;
}

// Bytes of send and of receive buffer one rank needs for the sweeps (Bench::run).
std::pair<std::size_t, std::size_t> buffer_bytes(const std::vector<Options>& sweeps, int n) {
  std::size_t send_most = 0, recv_most = 0;
  for (const Options& o : sweeps) {
    std::size_t send = 0, recv = 0;
    for (std::size_t size : o.sizes) {
      const Layout l = layout_for(o.op, size, kTypeSizes[o.type], n);
      send = std::max(send, l.send_elems);
      recv = std::max({recv, l.send_elems, l.recv_elems});
    }
    send_most = std::max(send_most, send * kTypeSizes[o.type]);
    recv_most = std::max(recv_most, recv * kTypeSizes[o.type]);
  }
  return {send_most, recv_most};
}

// Bytes of test buffers one rank allocates for the sweeps.
std::size_t test_buffer_bytes(const std::vector<Options>& sweeps, int n) {
  const auto [send, recv] = buffer_bytes(sweeps, n);
  return send + recv;
}

// Says where the buffers are, once: each rank's GPU, and, where ranks share
// one, that NCCL would refuse the job (it wants one rank per GPU), so that a
// reader sets no NCCL figures beside these.
json describe_gpus(rdmx::Communicator& comm, int mine, bool print) {
  std::vector<std::int64_t> gpus(static_cast<std::size_t>(comm.size()));
  const std::int64_t ordinal = mine;
  comm.all_gather(&ordinal, gpus.data(), 1, rdmx::DataType::Int64);
  if (print) {
    std::string list;
    for (std::int64_t g : gpus) list += (list.empty() ? "" : ",") + std::to_string(g);
    std::printf("# memory: cuda, device memory (cuMemAlloc), ranks on GPUs %s\n", list.c_str());
    std::vector<std::int64_t> seen;
    for (std::int64_t g : gpus) {
      const auto sharing = std::count(gpus.begin(), gpus.end(), g);
      if (sharing < 2 || std::find(seen.begin(), seen.end(), g) != seen.end()) continue;
      seen.push_back(g);
      std::printf(
          "# note: %lld ranks share GPU %lld; NCCL refuses that (one rank per GPU: ncclInvalidUsage), so it has no "
          "figures for this job to compare with\n",
          static_cast<long long>(sharing), static_cast<long long>(g));
    }
    std::printf("#\n");
    std::fflush(stdout);
  }
  return gpus;
}

void run(const Request& r, const std::vector<Options>& sweeps) {
  // The GPU is current before the communicator exists; its buffers are freed
  // after the communicator (declared before it), which may keep them registered.
  gpu::Gpu* gpu = nullptr;
  if (r.memory == "cuda") {
    const LaunchInfo launch = detect_launch();
    gpu = &gpu::Gpu::open(r.gpu, launch.local_rank >= 0 ? launch.local_rank : launch.rank, "--memory cuda");
  }
  std::unique_ptr<gpu::DeviceBuffer> device_send, device_recv;
  std::unique_ptr<rdmx::Communicator> comm = rdmx::Communicator::from_env();
  if (r.root >= comm->size()) {
    throw Error(ErrorCode::InvalidArgument,
                "-r " + std::to_string(r.root) + " is not a rank of " + std::to_string(comm->size()),
                {.op = "perf coll", .hint = "pick a root below the number of ranks"});
  }
  JsonLines lines(comm->rank() == 0 ? r.json_lines : std::string(), "--json-lines");
  json document = {{"schema", "rdmx.perf.coll/1"}, {"np", comm->size()}, {"memory", r.memory}, {"runs", json::array()}};
  DeviceBuffers device;
  if (gpu != nullptr) {
    document["gpus"] = describe_gpus(*comm, gpu->ordinal(), comm->rank() == 0 && !r.json);
    const auto [send, recv] = buffer_bytes(sweeps, comm->size());
    device_send = std::make_unique<gpu::DeviceBuffer>(*gpu, std::max<std::size_t>(send, 64));
    device_recv = std::make_unique<gpu::DeviceBuffer>(*gpu, std::max<std::size_t>(recv, 64));
    gpu->set(device_send->get(), 0, device_send->size());
    gpu->set(device_recv->get(), 0, device_recv->size());
    device = {gpu, device_send->get(), device_recv->get()};
  }
  long long wrong = 0;
  for (const Options& o : sweeps) {
    Bench bench(o, *comm, gpu != nullptr ? &device : nullptr);
    json one;
    wrong += bench.run(lines, one, !r.json);
    document["runs"].push_back(std::move(one));
  }
  if (comm->rank() == 0 && r.json) std::printf("%s\n", document.dump(2).c_str());
  if (wrong > 0) {
    if (comm->rank() == 0) std::fprintf(stderr, "rdmx perf coll: %lld wrong elements\n", wrong);
    throw ExitStatus{kExitWrong};
  }
}

}  // namespace

void register_perf_coll(CLI::App& perf) {
  auto* cmd = perf.add_subcommand(
      "coll",
      "nccl-tests-style sweeps of collectives: all_reduce, all_gather, reduce_scatter, broadcast, reduce, "
      "all_to_all, gather, scatter, barrier (or all). Run under a launcher, or alone: it then starts --np local "
      "ranks itself.");
  auto r = std::make_shared<Request>();
  cmd->add_option("collectives", r->ops, "collectives, comma-separated, or all")->required()->delimiter(',');
  cmd->add_option("-b,--minbytes", r->min_bytes, "smallest size (default 8)");
  cmd->add_option("-e,--maxbytes", r->max_bytes, "largest size (default 64M)");
  cmd->add_option("-f,--stepfactor", r->step_factor, "multiply the size by this between steps (default 2)");
  cmd->add_option("-i,--stepbytes", r->step_bytes, "add this to the size between steps (instead of -f)");
  cmd->add_option("--sizes", r->sizes, "explicit sizes instead of -b/-e: 4,4K,1M or 4K..16M");
  cmd->add_option("-n,--iters", r->iters, "timed iterations per size (default: 0.2 s worth, 5..10000)")
      ->check(CLI::Range(1L, 100000000L));
  cmd->add_option("-w,--warmup_iters", r->warmup, "untimed iterations per size (default max(5, iters/10))")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-c,--check", r->check, "check results: 1 (default) or 0")->check(CLI::Range(0, 1));
  cmd->add_option("-o,--op", r->redop, "reduction: sum, prod, min, max, avg, all (default sum)");
  cmd->add_option("-d,--datatype", r->type,
                  "int8, uint8, int32, uint32, int64, uint64, half, bfloat16, float, double, all (default float)");
  cmd->add_option("-r,--root", r->root, "root rank of broadcast, reduce, gather, scatter (default 0)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--np", r->np,
                  "local ranks to start when no launcher started this (default min(4, cores); refused when this "
                  "host's memory cannot hold them)")
      ->check(CLI::Range(1, 65536));
  cmd->add_option("--provider", r->provider, "sets RDMX_PROVIDER: shm, verbs, tcp or auto")->check(provider_names());
  cmd->add_option("--memory", r->memory,
                  "host (default) or cuda: the send and receive buffers are device memory of each rank's GPU; the "
                  "check copies through the driver")
      ->check(CLI::IsMember({"host", "cuda"}));
  cmd->add_option("--gpu", r->gpu,
                  "with --memory cuda: the GPU every rank uses (default: its local rank modulo the GPUs; ranks may "
                  "share one)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--json", r->json, "print one JSON document (docs/schemas/perf_coll.schema.json) instead of tables");
  cmd->add_option("--json-lines", r->json_lines, "also append one JSON object per row to this file");
  cmd->callback([r] {
    std::vector<Options> sweeps;
    try {
      sweeps = plan(*r);  // every rank would find the same mistake; say it once, before any starts
    } catch (const UsageError& e) {
      throw CLI::ValidationError("perf coll", e.message);
    }
    if (!r->provider.empty()) ::setenv("RDMX_PROVIDER", r->provider.c_str(), 1);
    const int np = r->np > 0 ? r->np : default_local_ranks();
    if (!launcher_present()) refuse_local_ranks_beyond_memory(np, -1, test_buffer_bytes(sweeps, np), "perf coll");
    if (run_self_as_local_ranks(np, "rdmx perf coll")) return;
    run(*r, sweeps);
  });
}

}  // namespace rdmx::cli
