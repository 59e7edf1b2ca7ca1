// SPDX-License-Identifier: MIT
// rdmx perf p2p: perftest's tests between two ranks, on any provider, with
// perftest's columns, units and round-trip conventions (docs/TOOLS.md).
//
// Latency. write_lat and send_lat are ping-pongs, as ib_write_lat and
// ib_send_lat: each side answers what it received, and a latency is half the
// time between two of one side's posts (RTT/2). read_lat and atomic_lat time
// each one-sided operation from post to completion, a full round trip, as
// ib_read_lat and ib_atomic_lat report it. The passive side of one-sided tests
// only drives progress.
//
// Bandwidth. Rank 0 keeps a window (-t, perftest --tx-depth) of operations
// outstanding, one in -Q (--cq-mod) signalled. write_bw ends with a
// WRITE_WITH_IMM whose receive tells rank 1 that all data landed, then rank 1
// checks the bytes; read_bw checks the bytes read; send_bw's receiver keeps
// receives posted. BW is bytes over the time from the first post to the last
// completion at rank 0; MB = 2^20 bytes (perftest), GB = 1e9 bytes.//
// The latency tests are in perf_p2p_latency.cpp, the bandwidth tests in
// perf_p2p_bandwidth.cpp; here, the options, the session and the output.
#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "launch/local_job.hpp"
#include "perf/perf_liveness.hpp"
#include "perf/perf_p2p.hpp"
#include "perf/perf_stats.hpp"
#include "rdmx/bootstrap.hpp"
#include "rdmx/info.hpp"
#include "rdmx/verbs.hpp"

namespace rdmx::cli {
namespace perf_p2p {

constexpr TestInfo kTests[] = {
    {Test::WriteLat, "write_lat", true, "RDMA_Write Latency Test",
     "t = half the round trip of a WRITE ping-pong (ib_write_lat)"},
    {Test::WriteBw, "write_bw", false, "RDMA_Write BW Test", "rank 0 WRITEs, a window of -t outstanding"},
    {Test::ReadLat, "read_lat", true, "RDMA_Read Latency Test",
     "t = one READ from post to completion, a full round trip (ib_read_lat)"},
    {Test::ReadBw, "read_bw", false, "RDMA_Read BW Test", "rank 0 READs, a window of -t outstanding"},
    {Test::SendLat, "send_lat", true, "Send Latency Test", "t = half the round trip of a SEND ping-pong (ib_send_lat)"},
    {Test::SendBw, "send_bw", false, "Send BW Test", "rank 0 SENDs, rank 1 keeps -t receives posted"},
    {Test::AtomicLat, "atomic_lat", true, "Atomic Latency Test",
     "t = one 8-byte atomic from post to completion, a full round trip (ib_atomic_lat)"},
};

std::uint64_t default_bw_iters(std::size_t size, std::size_t volume) {
  return std::clamp<std::uint64_t>(volume / size, 64, 5000);
}

std::vector<std::size_t> sizes_for(const Options& o, const TestInfo& t) {
  if (t.test == Test::AtomicLat) return {8};  // atomics are 8 bytes
  if (o.size_text.empty()) return {t.latency ? kDefaultLatencySize : kDefaultBandwidthSize};
  if (o.size_text == "all") return powers_of_two(2, std::size_t{8} << 20);
  return parse_size_list(o.size_text, "--size");
}

void check_completion(const WorkCompletion& wc, const QueuePair& qp, const char* what) {
  if (wc.status != WcStatus::Success) {
    throw Error(ErrorCode::PeerFailure,
                std::string(what) + " (work request " + std::to_string(wc.wr_id) + ") completed with " +
                    to_string(wc.status) + ": " + qp.error_reason(),
                {.op = "perf p2p"});
  }
}

void Session::write_bytes(std::size_t offset, const void* src, std::size_t bytes) {
  if (gpu != nullptr) {
    gpu->copy(base + offset, src, bytes);
  } else {
    std::memcpy(base + offset, src, bytes);
  }
}

void Session::read_bytes(std::size_t offset, void* dst, std::size_t bytes) {
  if (gpu != nullptr) {
    gpu->copy(dst, base + offset, bytes);
  } else {
    std::memcpy(dst, base + offset, bytes);
  }
}

void Session::zero(std::size_t offset, std::size_t bytes) {
  if (gpu != nullptr) {
    gpu->set(base + offset, 0, bytes);
  } else {
    std::memset(base + offset, 0, bytes);
  }
}

// Device memory of this rank's GPU, on a provider that serves it.
void open_gpu(Session& s, const DeviceCaps& caps) {
  if (caps.cuda_memory == CudaMemorySupport::None) {
    throw Error(ErrorCode::NotSupported,
                "--memory cuda: provider " + s.device->provider() +
                    " serves no CUDA device memory (caps().cuda_memory is none on " + s.device->name() + ")",
                {.op = "perf p2p",
                 .hint = "use a provider that does (rdmx info lists each one's CUDA memory: shm and tcp serve it), or "
                         "--memory host"});
  }
  const int local_rank = s.job.info.local_rank >= 0 ? s.job.info.local_rank : s.rank;
  s.gpu = &gpu::Gpu::open(s.options.gpu, local_rank, "--memory cuda");
}

void set_up(Session& s) {
  s.job = from_env();
  s.rank = s.job.info.rank;
  if (s.job.info.world_size != 2) {
    throw Error(ErrorCode::Config,
                "perf p2p runs between exactly 2 ranks, got " + std::to_string(s.job.info.world_size),
                {.hint = "launch 2 ranks (rdmx run -n 2 -- rdmx perf p2p ...), or run it with no launcher and it "
                         "starts 2 local ranks itself"});
  }
  s.peer = 1 - s.rank;
  s.heartbeat = std::make_unique<Heartbeat>(*s.job.store, s.rank, s.peer, s.timeout);
  s.device = open_device(s.options.provider);
  const DeviceCaps caps = s.device->caps();
  std::size_t largest = 8;
  for (const TestInfo* t : s.options.tests) {
    for (std::size_t size : sizes_for(s.options, *t)) largest = std::max(largest, size);
  }
  if (caps.max_msg_size != 0 && largest > caps.max_msg_size) {
    throw Error(
        ErrorCode::InvalidArgument,
        "size " + std::to_string(largest) + " exceeds the provider's max_msg_size " + std::to_string(caps.max_msg_size),
        {.op = "perf p2p", .hint = "pick smaller --size values"});
  }
  s.area = (largest + 63) / 64 * 64;
  // Unsignaled WRs hold their send-queue slots until a later signaled one completes.
  QpCaps qp_caps;
  qp_caps.max_send_wr = std::max<std::uint32_t>(qp_caps.max_send_wr, 2 * (s.options.window + s.options.cq_mod));
  qp_caps.max_recv_wr = std::max<std::uint32_t>(qp_caps.max_recv_wr, s.options.window + 16);
  if (caps.max_qp_wr != 0) {
    qp_caps.max_send_wr = std::min(qp_caps.max_send_wr, caps.max_qp_wr);
    qp_caps.max_recv_wr = std::min(qp_caps.max_recv_wr, caps.max_qp_wr);
  }
  s.options.window = std::min(s.options.window, qp_caps.max_recv_wr - 1);
  s.pd = s.device->alloc_pd();
  s.send_cq = s.device->create_cq(std::max<std::size_t>(256, 2 * std::size_t{qp_caps.max_send_wr}));
  s.recv_cq = s.device->create_cq(std::max<std::size_t>(256, 2 * std::size_t{qp_caps.max_recv_wr}));
  s.qp = s.device->create_qp(*s.pd, *s.send_cq, *s.recv_cq, qp_caps);
  const Access access = Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead | Access::RemoteAtomic;
  const std::size_t bytes = 2 * s.area + 64;
  if (s.options.cuda) {
    open_gpu(s, caps);
    s.device_buffer = std::make_unique<gpu::DeviceBuffer>(*s.gpu, bytes);
    s.base = s.device_buffer->get();
    s.mr = s.pd->register_memory(s.base, bytes, access);
    s.zero(0, bytes);
  } else if (s.options.allocate) {
    s.mr = s.pd->allocate_memory(bytes, access);
    s.base = static_cast<std::uint8_t*>(s.mr->addr());
    std::memset(s.base, 0, bytes);  // every page touched before timing
  } else {
    s.heap = std::make_unique<std::uint8_t[]>(bytes);  // zeroed, so every page is touched
    s.base = s.heap.get();
    s.mr = s.pd->register_memory(s.base, bytes, access);
  }
  s.control = s.pd->allocate_memory(64, access);
  std::memset(s.control->addr(), 0, 64);

  const std::string me = std::to_string(s.rank);
  const std::string them = std::to_string(s.peer);
  s.job.store->set("perf_p2p/qp/" + me, s.qp->local_address().to_hex());
  s.job.store->set("perf_p2p/buffer/" + me, std::to_string(reinterpret_cast<std::uint64_t>(s.base)) + " " +
                                                std::to_string(s.mr->rkey()) + " " +
                                                std::to_string(reinterpret_cast<std::uint64_t>(s.control->addr())) +
                                                " " + std::to_string(s.control->rkey()));
  s.qp->connect(QpAddress::from_hex(s.job.store->get_string("perf_p2p/qp/" + them)), {.peer_rank = s.peer});
  const std::string record = s.job.store->get_string("perf_p2p/buffer/" + them);
  unsigned long long addr = 0;
  unsigned rkey = 0;
  unsigned long long control = 0;
  unsigned control_rkey = 0;
  if (std::sscanf(record.c_str(), "%llu %u %llu %u", &addr, &rkey, &control, &control_rkey) != 4) {
    throw Error(ErrorCode::Protocol, "malformed buffer record '" + record + "' from rank " + them,
                {.op = "perf p2p", .peer_rank = s.peer});
  }
  s.peer_base = addr;
  s.peer_rkey = rkey;
  s.peer_control = control;
  s.peer_control_rkey = control_rkey;
}

void serve_until_done(Session& s) {
  const std::uint64_t expected = ++s.done_tokens;
  if (s.options.drive_progress) {
    std::atomic_ref<std::uint64_t> token(*static_cast<std::uint64_t*>(s.control->addr()));
    s.heartbeat->peer_progressed();  // the baseline
    SpinBudget budget(*s.qp, s.timeout, "rank 0 to finish", s.heartbeat->probe());
    while (token.load(std::memory_order_acquire) != expected) {
      s.device->progress();
      budget.tick();
    }
    s.barrier("served");
  } else {
    s.barrier_while_peer_progresses("served");
  }
}

void send_done_token(Session& s) {
  const std::uint64_t value = ++s.done_tokens;
  std::memcpy(static_cast<std::uint8_t*>(s.control->addr()) + 8, &value, 8);
  const Sge sge = s.control->sge(8, 8);
  s.qp->post_send({.wr_id = ~0ull,
                   .opcode = Opcode::RdmaWrite,
                   .sg_list = std::span(&sge, 1),
                   .remote_addr = s.peer_control,
                   .rkey = s.peer_control_rkey});
  WorkCompletion wc;
  s.send_cq->wait(std::span(&wc, 1), s.timeout);
  check_completion(wc, *s.qp, "the done token's WRITE");
  s.barrier("served");
}

namespace {

// ---------------------------------------------------------------------------
// Output, in perftest's columns.
void print_rule() {
  std::printf("---------------------------------------------------------------------------------------\n");
}

void print_banner(const Session& s, const TestInfo& t) {
  print_rule();
  std::printf("                    %s\n", t.title);
  // With auto the device is several providers; the transport is the one the QP took for this peer.
  std::printf(" Provider        : %s\n", s.device->provider().c_str());
  std::printf(" Transport       : %s\n", s.qp->provider().c_str());
  std::printf(" Device          : %s\n", s.device->name().c_str());
  std::printf(" Number of qps   : 1\t\tTransport type : rdmx RC\n");
  std::printf(" TX depth        : %u\n", t.latency ? 1u : s.options.window);
  std::printf(" CQ Moderation   : %u\n", s.options.cq_mod);
  if (t.test == Test::AtomicLat) std::printf(" Atomic Type     : %s\n", s.options.atomic.c_str());
  std::printf(" Progress        : %s\n",
              s.options.drive_progress ? "driven while spinning (Device::progress)" : "background engine only");
  if (s.gpu != nullptr) {
    std::printf(" Memory          : cuda: device memory of GPU %d (%s), cuMemAlloc, registered\n", s.gpu->ordinal(),
                s.gpu->name().c_str());
  } else {
    std::printf(" Memory          : host: %s\n",
                s.options.allocate ? "ProtectionDomain::allocate_memory" : "heap, registered (--heap)");
  }
  std::printf(" Convention      : %s%s\n", t.convention,
              s.gpu != nullptr && t.test == Test::WriteLat
                  ? "; on device memory each WRITE carries an immediate, whose receive completion marks arrival"
                  : "");
  std::printf(" Units           : %s\n", t.latency ? "usec"
                                                   : "MB/sec with MB = 2^20 bytes (perftest); GB/sec with GB = 1e9 "
                                                     "bytes; Mpps = 1e6 messages/sec");
  print_rule();
  if (t.latency) {
    std::printf(
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]"
        "   99%% percentile[usec]   99.9%% percentile[usec] \n");
  } else {
    std::printf(
        " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]   BW average[GB/sec]\n");
  }
}

void print_row(const TestInfo& t, const json& row) {
  if (t.latency) {
    std::printf(
        " %-7zu %-10llu     %-7.2f        %-7.2f      %-7.2f            %-7.2f        %-7.2f          %-7.2f"
        "                %-7.2f\n",
        row["bytes"].get<std::size_t>(), row["iterations"].get<unsigned long long>(), row["t_min_us"].get<double>(),
        row["t_max_us"].get<double>(), row["t_typical_us"].get<double>(), row["t_avg_us"].get<double>(),
        row["t_stdev_us"].get<double>(), row["p99_us"].get<double>(), row["p999_us"].get<double>());
  } else {
    std::printf(" %-10zu %-10llu     %-13.2f      %-13.2f        %-10.6f      %-8.3f\n",
                row["bytes"].get<std::size_t>(), row["iterations"].get<unsigned long long>(),
                row["bw_peak_mib_s"].get<double>(), row["bw_avg_mib_s"].get<double>(),
                row["msg_rate_mpps"].get<double>(), row["bw_avg_gb_s"].get<double>());
  }
}

void run(Options options) {
  Session s;
  s.options = std::move(options);
  s.timeout =
      s.options.timeout_s > 0 ? std::chrono::milliseconds(std::llround(s.options.timeout_s * 1000)) : default_timeout();
  set_up(s);
  JsonLines lines(s.rank == 0 ? s.options.json_lines : std::string(), "--json-lines");
  json document = {{"schema", "rdmx.perf.p2p/1"},
                   {"provider", s.device->provider()},
                   {"device", s.device->name()},
                   {"transport", s.qp->provider()},
                   {"tx_depth", s.options.window},
                   {"cq_mod", s.options.cq_mod},
                   {"progress", s.options.drive_progress},
                   {"memory", s.gpu != nullptr ? "cuda" : "host"},
                   {"runs", json::array()}};
  if (s.gpu != nullptr) document["gpu"] = s.gpu->ordinal();
  const bool table = s.rank == 0 && !s.options.json;
  for (const TestInfo* t : s.options.tests) {
    if (table) print_banner(s, *t);
    json rows = json::array();
    for (std::size_t size : sizes_for(s.options, *t)) {
      json row = t->latency ? run_latency(s, *t, size) : run_bandwidth(s, *t, size);
      if (s.rank != 0) continue;
      if (table) print_row(*t, row);
      json line = row;
      line["mode"] = t->name;
      line["provider"] = s.device->provider();
      line["progress"] = s.options.drive_progress;
      line["memory"] = s.gpu != nullptr ? "cuda" : "host";
      if (!t->latency) line["window"] = s.options.window;  // the field bench/*.sh have always read
      lines.write(line);
      rows.push_back(std::move(row));
    }
    if (table) print_rule();
    document["runs"].push_back(
        {{"test", t->name}, {"latency", t->latency}, {"convention", t->convention}, {"results", std::move(rows)}});
  }
  if (s.rank == 0 && s.options.json) std::printf("%s\n", document.dump(2).c_str());
  // Neither side tears its QP down while the other may still use it.
  s.barrier("end");
}

}  // namespace
}  // namespace perf_p2p

void register_perf_p2p(CLI::App& perf) {
  using namespace perf_p2p;
  auto* cmd = perf.add_subcommand(
      "p2p",
      "perftest-style tests between two ranks: write_lat, write_bw, read_lat, read_bw, send_lat, send_bw, "
      "atomic_lat. Run under a launcher with 2 ranks, or alone: it then starts 2 local ranks itself.");
  auto o = std::make_shared<Options>();
  std::vector<std::string> names;
  for (const TestInfo& t : kTests) names.emplace_back(t.name);
  cmd->add_option("tests", o->test_names, "tests to run, comma-separated (or 'all')")
      ->required()
      ->delimiter(',')
      ->check(CLI::IsMember([&] {
        auto all = names;
        all.emplace_back("all");
        return all;
      }()));
  cmd->add_option("-s,--size", o->size_text,
                  "message sizes: 8 | 64K,1M | 64K..16M (doubling) | all (2 B..8 MiB); default 2 (latency), 64K "
                  "(bandwidth), as perftest");
  cmd->add_option("-n,--iters", o->iters,
                  "iterations per size (default: 1000 latency; about 1 GiB, 64..5000, bandwidth)")
      ->check(CLI::Range(std::uint64_t{2}, std::uint64_t{100000000}));
  cmd->add_option("--volume", o->volume_text, "bandwidth: bytes to move per size when -n is not given (default 1G)");
  cmd->add_option("--warmup", o->warmup, "untimed iterations before each size (default: 100 latency; -t bandwidth)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-t,--tx-depth", o->window, "bandwidth: operations outstanding (perftest --tx-depth)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("-Q,--cq-mod", o->cq_mod, "signal one work request in this many (perftest --cq-mod)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("-A,--atomic", o->atomic, "atomic_lat: fetch_add or cmp_swap")
      ->check(CLI::IsMember({"fetch_add", "cmp_swap"}));
  cmd->add_option("--provider", o->provider, "shm, verbs, tcp or auto (default: RDMX_PROVIDER, else auto)")
      ->check(provider_names());
  cmd->add_flag("--json", o->json, "print one JSON document (docs/schemas/perf_p2p.schema.json) instead of the table");
  cmd->add_option("--json-lines", o->json_lines, "also append one JSON object per row to this file");
  cmd->add_flag("!--no-progress", o->drive_progress, "do not call Device::progress() while spinning");
  cmd->add_flag("!--heap", o->allocate, "register heap memory instead of allocate_memory");
  cmd->add_option("--memory", o->memory,
                  "host (default) or cuda: the buffers each rank registers, reads and writes are device memory of "
                  "its GPU (on providers that serve it: shm, tcp)")
      ->check(CLI::IsMember({"host", "cuda"}));
  cmd->add_option("--gpu", o->gpu,
                  "with --memory cuda: the GPU each rank uses (default: its local rank modulo the GPUs)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--timeout", o->timeout_s,
                  "seconds of silence any wait may last, 0.001 to 2592000 (30 days) (default RDMX_TIMEOUT)")
      ->check(CLI::Range(0.001, 2592000.0));
  cmd->callback([o] {
    o->tests.clear();
    for (const auto& name : o->test_names) {
      for (const TestInfo& t : kTests) {
        if (name == "all" || name == t.name) {
          if (std::find(o->tests.begin(), o->tests.end(), &t) == o->tests.end()) o->tests.push_back(&t);
        }
      }
    }
    if (o->memory == "cuda" && !o->allocate) {
      throw CLI::ValidationError("--heap", "registers heap memory; it does not go with --memory cuda");
    }
    o->cuda = o->memory == "cuda";
    // Sizes are checked here, before any rank starts, so a typo is one usage error.
    try {
      for (const TestInfo* t : o->tests) sizes_for(*o, *t);
      if (!o->volume_text.empty()) o->volume = parse_size(o->volume_text, "--volume");
      if (o->volume == 0) throw UsageError{"--volume must be positive"};
    } catch (const UsageError& e) {
      throw CLI::ValidationError("--size", e.message);
    }
    if (run_self_as_local_ranks(2, "rdmx perf p2p")) return;
    run(*o);
  });
}

}  // namespace rdmx::cli
