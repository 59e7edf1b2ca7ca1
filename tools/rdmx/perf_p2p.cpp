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
// completion at rank 0; MB = 2^20 bytes (perftest), GB = 1e9 bytes.
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

#include "commands.hpp"
#include "local_job.hpp"
#include "perf_common.hpp"
#include "perf_liveness.hpp"
#include "perf_stats.hpp"
#include "rdmx/bootstrap.hpp"
#include "rdmx/info.hpp"
#include "rdmx/verbs.hpp"

namespace rdmx::cli {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

enum class Test { WriteLat, WriteBw, ReadLat, ReadBw, SendLat, SendBw, AtomicLat };

struct TestInfo {
  Test test;
  const char* name;
  bool latency;
  const char* title;       // perftest's banner title
  const char* convention;  // how a latency or bandwidth figure is defined
};

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

struct Options {
  std::vector<std::string> test_names;
  std::vector<const TestInfo*> tests;
  std::string size_text;
  std::uint64_t iters = 0;     // 0: the test's default
  std::int64_t warmup = -1;    // -1: the test's default
  std::uint32_t window = 128;  // perftest --tx-depth
  std::uint32_t cq_mod = 100;  // perftest --cq-mod
  std::string atomic = "fetch_add";
  std::string provider = "auto";
  bool json = false;
  std::string json_lines;
  bool drive_progress = true;  // call Device::progress() while spinning
  bool allocate = true;        // buffers from allocate_memory (as ucx_perftest maps with ucp_mem_map); --heap: registered heap
  double timeout_s = 0;
  std::string volume_text;     // --volume as given
  std::size_t volume = std::size_t{1} << 30;  // bandwidth: bytes to move per size when -n is not given
};

// perftest's defaults: 2 bytes and 1000 iterations for latency, 64 KiB for bandwidth.
constexpr std::size_t kDefaultLatencySize = 2;
constexpr std::size_t kDefaultBandwidthSize = 65536;
constexpr std::uint64_t kDefaultLatencyIters = 1000;
constexpr std::uint64_t kDefaultLatencyWarmup = 100;

// Enough iterations to move `volume` bytes (default 1 GiB) per size, within perftest's usual range.
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
    throw Error(ErrorCode::PeerFailure, std::string(what) + " (work request " + std::to_string(wc.wr_id) +
                                            ") completed with " + to_string(wc.status) + ": " + qp.error_reason(),
                {.op = "perf p2p"});
  }
}

// Everything one rank needs to run the tests, set up once.
struct Session {
  Options options;
  std::chrono::milliseconds timeout{};
  Bootstrap job;
  int rank = -1;
  int peer = -1;
  std::shared_ptr<Device> device;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<CompletionQueue> send_cq;
  std::unique_ptr<CompletionQueue> recv_cq;
  std::unique_ptr<QueuePair> qp;
  // [0, area): written or sent into by the peer, and where READs land;
  // [area, 2 area): what we send and what the peer READs;
  // [2 area, 2 area + 64): the atomic target (8 bytes) and the done token.
  std::size_t area = 0;
  std::unique_ptr<std::uint8_t[]> heap;
  std::uint8_t* base = nullptr;
  std::unique_ptr<MemoryRegion> mr;
  std::uint64_t peer_base = 0;
  std::uint32_t peer_rkey = 0;
  int barrier_count = 0;
  std::uint64_t done_tokens = 0;
  // Rank 0 shows progress through it; rank 1 consults it before giving up.
  std::unique_ptr<Heartbeat> heartbeat;

  std::uint8_t* receive_area() { return base; }
  std::uint8_t* send_area() { return base + area; }
  std::size_t control_offset() const { return 2 * area; }
  std::size_t token_offset() const { return 2 * area + 8; }

  // Both ranks arrive before either leaves; bounded by the timeout.
  void barrier(const char* name) {
    const std::string phase = "perf_p2p/barrier/" + std::to_string(barrier_count++) + "/" + name + "/";
    job.store->set(phase + std::to_string(rank), std::string_view("1"));
    job.store->wait({phase + std::to_string(peer)}, timeout);
  }
  void drive() {
    if (options.drive_progress) device->progress();
  }
  // A barrier on the passive side of a long one-sided stream: it waits as long
  // as the peer shows progress.
  void barrier_while_peer_progresses(const char* name) {
    const std::string phase = "perf_p2p/barrier/" + std::to_string(barrier_count++) + "/" + name + "/";
    job.store->set(phase + std::to_string(rank), std::string_view("1"));
    heartbeat->wait_key(phase + std::to_string(peer));
  }
};

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
    throw Error(ErrorCode::InvalidArgument, "size " + std::to_string(largest) + " exceeds the provider's max_msg_size " +
                                                std::to_string(caps.max_msg_size),
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
  if (s.options.allocate) {
    s.mr = s.pd->allocate_memory(bytes, access);
    s.base = static_cast<std::uint8_t*>(s.mr->addr());
    std::memset(s.base, 0, bytes);  // every page touched before timing
  } else {
    s.heap = std::make_unique<std::uint8_t[]>(bytes);  // zeroed, so every page is touched
    s.base = s.heap.get();
    s.mr = s.pd->register_memory(s.base, bytes, access);
  }

  const std::string me = std::to_string(s.rank);
  const std::string them = std::to_string(s.peer);
  s.job.store->set("perf_p2p/qp/" + me, s.qp->local_address().to_hex());
  s.job.store->set("perf_p2p/buffer/" + me,
                   std::to_string(reinterpret_cast<std::uint64_t>(s.base)) + " " + std::to_string(s.mr->rkey()));
  s.qp->connect(QpAddress::from_hex(s.job.store->get_string("perf_p2p/qp/" + them)), {.peer_rank = s.peer});
  const std::string record = s.job.store->get_string("perf_p2p/buffer/" + them);
  unsigned long long addr = 0;
  unsigned rkey = 0;
  if (std::sscanf(record.c_str(), "%llu %u", &addr, &rkey) != 2) {
    throw Error(ErrorCode::Protocol, "malformed buffer record '" + record + "' from rank " + them,
                {.op = "perf p2p", .peer_rank = s.peer});
  }
  s.peer_base = addr;
  s.peer_rkey = rkey;
}

// ---------------------------------------------------------------------------
// The passive side of one-sided tests: drives progress until rank 0's done
// token lands (or, with --no-progress, leaves the work to the background engine).
void serve_until_done(Session& s) {
  const std::uint64_t expected = ++s.done_tokens;
  if (s.options.drive_progress) {
    std::atomic_ref<std::uint64_t> token(*reinterpret_cast<std::uint64_t*>(s.base + s.token_offset()));
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
  auto* local = reinterpret_cast<std::uint64_t*>(s.send_area());  // scratch; the tests are over
  const std::uint64_t saved = *local;
  *local = value;
  const Sge sge = s.mr->sge(s.area, 8);
  s.qp->post_send({.wr_id = ~0ull, .opcode = Opcode::RdmaWrite, .sg_list = std::span(&sge, 1),
                   .remote_addr = s.peer_base + s.token_offset(), .rkey = s.peer_rkey});
  WorkCompletion wc;
  s.send_cq->wait(std::span(&wc, 1), s.timeout);
  check_completion(wc, *s.qp, "the done token's WRITE");
  *local = saved;
  s.barrier("served");
}

// ---------------------------------------------------------------------------
// Latency
std::vector<double> ping_pong(Session& s, const TestInfo& t, std::size_t size, std::uint64_t total) {
  ns_per_tick();  // calibrated before the clock matters
  std::vector<std::uint64_t> posted(total);
  std::memset(s.receive_area(), 0, size);
  const bool use_send = t.test == Test::SendLat;
  const Sge sge = s.mr->sge(s.area, static_cast<std::uint32_t>(size));
  const Sge recv_sge = s.mr->sge(0, static_cast<std::uint32_t>(size));
  SendWr wr{.opcode = use_send ? Opcode::Send : Opcode::RdmaWrite, .sg_list = std::span(&sge, 1),
            .remote_addr = s.peer_base, .rkey = s.peer_rkey};
  constexpr std::uint64_t kRecvDepth = 16;
  if (use_send) {
    for (std::uint64_t i = 0; i < std::min(kRecvDepth, total); ++i) {
      s.qp->post_recv({.wr_id = i, .sg_list = std::span(&recv_sge, 1)});
    }
  }
  std::uint64_t recv_posted = std::min(kRecvDepth, total);
  std::atomic_ref<std::uint8_t> arrived(s.receive_area()[size - 1]);
  std::uint8_t& outgoing = s.send_area()[size - 1];
  std::array<WorkCompletion, 8> completions;
  std::uint64_t signaled_in_flight = 0;
  std::uint64_t sent = 0;
  std::uint64_t received = 0;
  const bool initiator = s.rank == 0;

  // Reaps signaled send completions; blocks only when more than `keep_at_most` are left.
  auto reap = [&](std::uint64_t keep_at_most) {
    SpinBudget budget(*s.qp, s.timeout, "a signaled send completion");
    for (;;) {
      const std::size_t n = s.send_cq->poll(completions);
      for (std::size_t i = 0; i < n; ++i) check_completion(completions[i], *s.qp, t.name);
      signaled_in_flight -= n;
      if (signaled_in_flight <= keep_at_most) return;
      if (n > 0) budget.progressed();
      s.drive();
      budget.tick();
    }
  };

  s.barrier(t.name);
  while (sent < total || received < total) {
    // The initiator speaks first; then each side answers what it received.
    if (received < total && (sent > 0 || !initiator)) {
      ++received;
      if (use_send) {
        WorkCompletion wc;
        SpinBudget budget(*s.qp, s.timeout, "the peer's SEND");
        while (s.recv_cq->poll(std::span(&wc, 1)) == 0) {
          s.drive();
          budget.tick();
        }
        check_completion(wc, *s.qp, "a receive");
        if (recv_posted < total) {
          s.qp->post_recv({.wr_id = recv_posted++, .sg_list = std::span(&recv_sge, 1)});
        }
      } else {
        const auto expected = static_cast<std::uint8_t>(received);
        SpinBudget budget(*s.qp, s.timeout, "the peer's RDMA WRITE");
        while (arrived.load(std::memory_order_acquire) != expected) {
          s.drive();
          budget.tick();
        }
      }
    }
    if (sent < total) {
      posted[sent] = ticks();
      outgoing = static_cast<std::uint8_t>(++sent);
      wr.wr_id = sent;
      wr.signaled = sent % s.options.cq_mod == 0 || sent == total;
      s.qp->post_send(wr);
      if (wr.signaled) ++signaled_in_flight;
      // Completions are reaped off the critical path; blocking only keeps the send queue from filling.
      if (signaled_in_flight > 0) reap(1);
    }
  }
  reap(0);
  std::vector<double> half_rtts;
  for (std::uint64_t i = 1; i < posted.size(); ++i) {
    half_rtts.push_back(static_cast<double>(posted[i] - posted[i - 1]) * ns_per_tick() / 1000.0 / 2);
  }
  return half_rtts;
}

// Rank 0 times `total` one-sided operations, one at a time; rank 1 serves.
std::vector<double> one_sided(Session& s, const TestInfo& t, std::size_t size, std::uint64_t total) {
  ns_per_tick();
  s.barrier(t.name);
  std::vector<double> samples;
  if (s.rank != 0) {
    serve_until_done(s);
    return samples;
  }
  samples.reserve(total);
  const bool atomic = t.test == Test::AtomicLat;
  const Sge sge = s.mr->sge(0, static_cast<std::uint32_t>(atomic ? 8 : size));
  SendWr wr{.sg_list = std::span(&sge, 1), .rkey = s.peer_rkey};
  if (atomic) {
    wr.opcode = s.options.atomic == "cmp_swap" ? Opcode::AtomicCmpSwap : Opcode::AtomicFetchAdd;
    wr.remote_addr = s.peer_base + s.control_offset();
  } else {
    wr.opcode = Opcode::RdmaRead;
    wr.remote_addr = s.peer_base + s.area;
  }
  std::uint64_t target_value = 0;  // the compare value that makes each compare-and-swap succeed
  WorkCompletion wc;
  for (std::uint64_t i = 0; i < total; ++i) {
    wr.wr_id = i;
    wr.compare_add = wr.opcode == Opcode::AtomicCmpSwap ? target_value : 1;
    wr.swap = target_value + 1;
    const std::uint64_t start = ticks();
    s.qp->post_send(wr);
    SpinBudget budget(*s.qp, s.timeout, t.name);
    while (s.send_cq->poll(std::span(&wc, 1)) == 0) {
      s.drive();
      budget.tick();
    }
    const std::uint64_t end = ticks();
    check_completion(wc, *s.qp, t.name);
    samples.push_back(static_cast<double>(end - start) * ns_per_tick() / 1000.0);
    s.heartbeat->beat(Clock::now());
    if (atomic) {
      std::uint64_t original = 0;
      std::memcpy(&original, s.receive_area(), 8);
      if (original != target_value) {
        throw Error(ErrorCode::Protocol, std::string(t.name) + ": the atomic returned " + std::to_string(original) +
                                             ", expected " + std::to_string(target_value),
                    {.op = "perf p2p", .peer_rank = s.peer});
      }
      ++target_value;
    }
  }
  send_done_token(s);
  return samples;
}

json run_latency(Session& s, const TestInfo& t, std::size_t size) {
  const std::uint64_t iters = s.options.iters != 0 ? s.options.iters : kDefaultLatencyIters;
  const auto warmup = static_cast<std::uint64_t>(s.options.warmup >= 0 ? s.options.warmup : kDefaultLatencyWarmup);
  std::vector<double> samples = t.test == Test::WriteLat || t.test == Test::SendLat
                                    ? ping_pong(s, t, size, warmup + iters + 1)
                                    : one_sided(s, t, size, warmup + iters);
  if (s.rank != 0) return {};
  samples.erase(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(warmup));
  const LatencyStats st = summarize(samples);
  return {{"bytes", size},         {"iterations", iters}, {"t_min_us", st.min},       {"t_max_us", st.max},
          {"t_typical_us", st.typical}, {"t_avg_us", st.average}, {"t_stdev_us", st.stdev}, {"p99_us", st.p99},
          {"p999_us", st.p999}};
}

// ---------------------------------------------------------------------------
// Bandwidth
std::uint8_t pattern_byte(std::size_t offset) { return static_cast<std::uint8_t>(offset % 251); }

struct BwResult {
  double seconds = 0;
  double peak_bytes_per_second = 0;
};

// Rank 0: `count` operations of `size` with at most `window` outstanding.
BwResult stream(Session& s, const TestInfo& t, std::size_t size, std::uint64_t count, bool final_imm) {
  const std::uint32_t window = s.options.window;
  // A signal interval above the window would stall: nothing completes until it is reached.
  const std::uint32_t signal_every = std::min(s.options.cq_mod, window);
  const bool read = t.test == Test::ReadBw;
  const Sge sge = s.mr->sge(read ? 0 : s.area, static_cast<std::uint32_t>(size));
  SendWr wr{.sg_list = std::span(&sge, 1), .remote_addr = s.peer_base + (read ? s.area : 0), .rkey = s.peer_rkey};
  std::array<WorkCompletion, 16> completions;
  // (time, operations completed by then) at each signaled completion, for the peak.
  std::vector<std::pair<Clock::time_point, std::uint64_t>> marks;
  marks.reserve(count / signal_every + 2);
  std::uint64_t posted = 0;
  std::uint64_t completed = 0;
  const auto start = Clock::now();
  marks.emplace_back(start, 0);
  SpinBudget budget(*s.qp, s.timeout, "bandwidth completions");
  while (completed < count) {
    while (posted < count && posted - completed < window) {
      ++posted;
      const bool last = posted == count;
      wr.wr_id = posted;  // a signaled completion covers every WR up to its id
      if (read) wr.opcode = Opcode::RdmaRead;
      else if (t.test == Test::SendBw) wr.opcode = Opcode::Send;
      else wr.opcode = last && final_imm ? Opcode::RdmaWriteWithImm : Opcode::RdmaWrite;
      wr.imm_data = static_cast<std::uint32_t>(size);
      wr.signaled = last || posted % signal_every == 0;
      s.qp->post_send(wr);
    }
    const std::size_t n = s.send_cq->poll(completions);
    if (n == 0) {
      s.drive();
      budget.tick();
      continue;
    }
    for (std::size_t i = 0; i < n; ++i) {
      check_completion(completions[i], *s.qp, t.name);
      completed = std::max(completed, completions[i].wr_id);
    }
    const auto now = Clock::now();
    marks.emplace_back(now, completed);
    budget.progressed();
    s.heartbeat->beat(now);
  }
  BwResult result;
  result.seconds = std::chrono::duration<double>(marks.back().first - start).count();
  // Peak: the best rate over any stretch of at least one window, so completions
  // that arrive in a burst do not count as infinite bandwidth.
  std::size_t later = 0;
  for (std::size_t earlier = 0; earlier < marks.size(); ++earlier) {
    later = std::max(later, earlier + 1);
    while (later < marks.size() && marks[later].second - marks[earlier].second < window) ++later;
    if (later == marks.size()) break;
    const double span = std::chrono::duration<double>(marks[later].first - marks[earlier].first).count();
    const auto bytes = static_cast<double>((marks[later].second - marks[earlier].second) * size);
    if (span > 0) result.peak_bytes_per_second = std::max(result.peak_bytes_per_second, bytes / span);
  }
  const double average = static_cast<double>(count * size) / result.seconds;
  result.peak_bytes_per_second = std::max(result.peak_bytes_per_second, average);
  return result;
}

void check_pattern(const std::uint8_t* data, std::size_t size, const char* what) {
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] != pattern_byte(i)) {
      throw Error(ErrorCode::Protocol, std::string(what) + ": wrong byte at offset " + std::to_string(i) + " of " +
                                           std::to_string(size) + " (got " + std::to_string(data[i]) + ", expected " +
                                           std::to_string(pattern_byte(i)) + ")",
                  {.op = "perf p2p"});
    }
  }
}

// Rank 1 of send_bw: keeps receives posted until `count` have arrived.
void receive_sends(Session& s, std::size_t size, std::uint64_t count) {
  const Sge sge = s.mr->sge(0, static_cast<std::uint32_t>(size));
  std::uint64_t posted = 0;
  std::uint64_t received = 0;
  const std::uint64_t depth = s.options.window;
  for (; posted < std::min(depth, count); ++posted) s.qp->post_recv({.wr_id = posted, .sg_list = std::span(&sge, 1)});
  s.barrier("send_bw");
  std::array<WorkCompletion, 16> completions;
  SpinBudget budget(*s.qp, s.timeout, "the peer's SENDs");
  while (received < count) {
    const std::size_t n = s.recv_cq->poll(completions);
    if (n == 0) {
      s.drive();
      budget.tick();
      continue;
    }
    budget.progressed();
    for (std::size_t i = 0; i < n; ++i) {
      check_completion(completions[i], *s.qp, "a receive");
      ++received;
      if (posted < count) s.qp->post_recv({.wr_id = posted++, .sg_list = std::span(&sge, 1)});
    }
  }
}

json run_bandwidth(Session& s, const TestInfo& t, std::size_t size) {
  constexpr double kMiB = 1024.0 * 1024.0;
  const std::uint64_t iters = s.options.iters != 0 ? s.options.iters : default_bw_iters(size, s.options.volume);
  const auto warmup = static_cast<std::uint64_t>(s.options.warmup >= 0 ? s.options.warmup : s.options.window);
  std::memset(s.receive_area(), 0, size);
  for (std::size_t i = 0; i < size; ++i) s.send_area()[i] = pattern_byte(i);
  if (t.test == Test::SendBw) {
    if (s.rank == 1) {
      receive_sends(s, size, warmup + iters);
      return {};
    }
    s.barrier("send_bw");
  } else if (t.test == Test::WriteBw) {
    if (s.rank == 1) {
      // The closing WRITE_WITH_IMM consumes one receive.
      const Sge scratch = s.mr->sge(s.control_offset() + 16, 1);
      s.qp->post_recv({.wr_id = size, .sg_list = std::span(&scratch, 1)});
    }
    s.barrier(t.name);
    if (s.rank == 1) {
      WorkCompletion wc;
      s.heartbeat->wait_completion(*s.recv_cq, *s.qp, wc, "the closing WRITE_WITH_IMM");
      check_completion(wc, *s.qp, "the closing WRITE_WITH_IMM");
      if (wc.opcode != WcOpcode::RecvRdmaWithImm || wc.imm_data != static_cast<std::uint32_t>(size)) {
        throw Error(ErrorCode::Protocol, std::string("expected WRITE_WITH_IMM(") + std::to_string(size) + "), got " +
                                             to_string(wc.opcode) + " imm=" + std::to_string(wc.imm_data),
                    {.op = "perf p2p write_bw", .peer_rank = s.peer});
      }
      check_pattern(s.receive_area(), size, "write_bw: the data rank 0 wrote");
      return {};
    }
  } else {  // read_bw
    s.barrier(t.name);
    if (s.rank == 1) {
      serve_until_done(s);
      return {};
    }
  }
  if (warmup > 0) stream(s, t, size, warmup, false);
  const BwResult r = stream(s, t, size, iters, true);
  if (t.test == Test::ReadBw) {
    check_pattern(s.receive_area(), size, "read_bw: the data read from rank 1");
    send_done_token(s);
  }
  const double average = static_cast<double>(iters * size) / r.seconds;
  return {{"bytes", size},
          {"iterations", iters},
          {"bw_peak_mib_s", r.peak_bytes_per_second / kMiB},
          {"bw_avg_mib_s", average / kMiB},
          {"msg_rate_mpps", static_cast<double>(iters) / r.seconds / 1e6},
          {"bw_avg_gb_s", average / 1e9}};
}

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
  std::printf(" Memory          : %s\n",
              s.options.allocate ? "ProtectionDomain::allocate_memory" : "heap, registered (--heap)");
  std::printf(" Convention      : %s\n", t.convention);
  std::printf(" Units           : %s\n", t.latency ? "usec"
                                                   : "MB/sec with MB = 2^20 bytes (perftest); GB/sec with GB = 1e9 "
                                                     "bytes; Mpps = 1e6 messages/sec");
  print_rule();
  if (t.latency) {
    std::printf(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]"
                "   99%% percentile[usec]   99.9%% percentile[usec] \n");
  } else {
    std::printf(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]   BW average[GB/sec]\n");
  }
}

void print_row(const TestInfo& t, const json& row) {
  if (t.latency) {
    std::printf(" %-7zu %-10llu     %-7.2f        %-7.2f      %-7.2f            %-7.2f        %-7.2f          %-7.2f"
                "                %-7.2f\n",
                row["bytes"].get<std::size_t>(), row["iterations"].get<unsigned long long>(),
                row["t_min_us"].get<double>(), row["t_max_us"].get<double>(), row["t_typical_us"].get<double>(),
                row["t_avg_us"].get<double>(), row["t_stdev_us"].get<double>(), row["p99_us"].get<double>(),
                row["p999_us"].get<double>());
  } else {
    std::printf(" %-10zu %-10llu     %-13.2f      %-13.2f        %-10.6f      %-8.3f\n", row["bytes"].get<std::size_t>(),
                row["iterations"].get<unsigned long long>(), row["bw_peak_mib_s"].get<double>(),
                row["bw_avg_mib_s"].get<double>(), row["msg_rate_mpps"].get<double>(),
                row["bw_avg_gb_s"].get<double>());
  }
}

void run(Options options) {
  Session s;
  s.options = std::move(options);
  s.timeout = s.options.timeout_s > 0 ? std::chrono::milliseconds(std::llround(s.options.timeout_s * 1000))
                                      : default_timeout();
  set_up(s);
  JsonLines lines(s.rank == 0 ? s.options.json_lines : std::string(), "--json-lines");
  json document = {{"schema", "rdmx.perf.p2p/1"},
                   {"provider", s.device->provider()},
                   {"device", s.device->name()},
                   {"transport", s.qp->provider()},
                   {"tx_depth", s.options.window},
                   {"cq_mod", s.options.cq_mod},
                   {"progress", s.options.drive_progress},
                   {"runs", json::array()}};
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
      if (!t->latency) line["window"] = s.options.window;  // the field bench/*.sh have always read
      lines.write(line);
      rows.push_back(std::move(row));
    }
    if (table) print_rule();
    document["runs"].push_back({{"test", t->name}, {"latency", t->latency}, {"convention", t->convention},
                                {"results", std::move(rows)}});
  }
  if (s.rank == 0 && s.options.json) std::printf("%s\n", document.dump(2).c_str());
  // Neither side tears its QP down while the other may still use it.
  s.barrier("end");
}

}  // namespace

void register_perf_p2p(CLI::App& perf) {
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
  cmd->add_option("-n,--iters", o->iters, "iterations per size (default: 1000 latency; about 1 GiB, 64..5000, bandwidth)")
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
