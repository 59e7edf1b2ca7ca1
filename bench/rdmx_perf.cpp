// bench/rdmx_perf.cpp: perftest-style two-rank benchmark over the public API.
//
//   rdmx_perf --mode write_lat [--size 8|LIST|LO..HI|all] [--iters N] [--warmup N]
//   rdmx_perf --mode write_bw  [--size 64K..16M] [--iters N] [--window N] [--cq-mod N]
//
// Start two processes with RDMX_RANK=0/1, RDMX_WORLD_SIZE=2 and a shared
// RDMX_STORE (bench/run_tcp.sh does). Rank 0 prints perftest's table;
// --json PATH also appends one JSON line per size there.
//
// write_lat is ib_write_lat's ping-pong: each side RDMA-WRITEs its buffer into
// the peer's, whose last byte carries the iteration number; the receiver spins
// on that byte (driving the provider with Device::progress(), as UCX spins on
// ucp_worker_progress) and answers. Latency is RTT/2 from the post times.
// write_bw is ib_write_bw: rank 0 keeps a window of WRITEs outstanding,
// signalling one in every --cq-mod; the last is a WRITE_WITH_IMM, whose receive
// completion tells rank 1 that everything before it has landed.
#include <rdmx/bootstrap.hpp>
#include <rdmx/verbs.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using rdmx::Error;
using rdmx::ErrorCode;

enum class Mode { WriteLat, WriteBw };

struct Options {
  Mode mode = Mode::WriteLat;
  std::vector<std::size_t> sizes;  // empty: the mode's default
  std::uint64_t iters = 0;         // 0: the mode's default
  std::int64_t warmup = -1;        // -1: the mode's default
  std::uint32_t window = 128;      // bw: outstanding WRITEs (perftest --tx-depth)
  std::uint32_t cq_mod = 100;      // one signaled WR in every cq_mod (perftest --cq-mod)
  std::string provider = "tcp";
  std::string json_path;
  bool drive_progress = true;      // call Device::progress() while spinning
  bool allocate = true;            // buffers from ProtectionDomain::allocate_memory (as ucx_perftest maps
                                   // with ucp_mem_map); --heap registers ordinary heap memory instead
  std::chrono::milliseconds timeout{0};
};

constexpr const char* kUsage =
    "usage: rdmx_perf --mode write_lat|write_bw [--size 8|64K,1M|64K..16M|all] [--iters N] [--warmup N]\n"
    "                 [--window N] [--cq-mod N] [--provider tcp] [--json PATH] [--no-progress] [--heap] [--timeout SECONDS]\n"
    "Run two processes with RDMX_RANK=0/1, RDMX_WORLD_SIZE=2 and a shared RDMX_STORE (see bench/run_tcp.sh).\n";

[[noreturn]] void usage_error(const std::string& message) {
  throw Error(ErrorCode::InvalidArgument, message, {.hint = "run rdmx_perf --help"});
}

std::uint64_t parse_count(std::string_view text, const char* option) {
  std::uint64_t value = 0;
  if (text.empty()) usage_error(std::string(option) + " needs a number");
  for (char c : text) {
    if (c < '0' || c > '9') usage_error(std::string(option) + ": '" + std::string(text) + "' is not a number");
    value = value * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return value;
}

// "8", "64K", "16M", "1G" (binary multiples, as perftest sizes).
std::size_t parse_size(std::string_view text) {
  std::size_t shift = 0;
  if (!text.empty()) {
    switch (text.back()) {
      case 'K': case 'k': shift = 10; break;
      case 'M': case 'm': shift = 20; break;
      case 'G': case 'g': shift = 30; break;
      default: break;
    }
  }
  if (shift != 0) text.remove_suffix(1);
  const std::size_t size = parse_count(text, "--size") << shift;
  if (size == 0 || size > (std::size_t{1} << 31)) usage_error("--size: " + std::to_string(size) + " is out of [1, 2 GiB]");
  return size;
}

std::vector<std::size_t> powers_of_two(std::size_t low, std::size_t high) {
  std::vector<std::size_t> sizes;
  for (std::size_t size = low; size <= high; size *= 2) sizes.push_back(size);
  return sizes;
}

// A comma list of sizes, a doubling range LO..HI, or "all".
std::vector<std::size_t> parse_sizes(std::string_view text, Mode mode) {
  if (text == "all") return mode == Mode::WriteLat ? powers_of_two(2, std::size_t{8} << 20) : powers_of_two(2, std::size_t{16} << 20);
  if (const auto dots = text.find(".."); dots != std::string_view::npos) {
    return powers_of_two(parse_size(text.substr(0, dots)), parse_size(text.substr(dots + 2)));
  }
  std::vector<std::size_t> sizes;
  while (!text.empty()) {
    const auto comma = text.find(',');
    sizes.push_back(parse_size(text.substr(0, comma)));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
  }
  return sizes;
}

Options parse_options(int argc, char** argv) {
  Options options;
  std::string size_text;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::string_view value;
    const bool takes_value = arg != "--no-progress" && arg != "--heap" && arg != "--help" && arg != "-h";
    if (const auto eq = arg.find('='); eq != std::string_view::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (takes_value) {
      if (i + 1 >= argc) usage_error(std::string(arg) + " needs a value");
      value = argv[++i];
    }
    if (arg == "--mode") {
      if (value == "write_lat") options.mode = Mode::WriteLat;
      else if (value == "write_bw") options.mode = Mode::WriteBw;
      else usage_error("--mode: unknown mode '" + std::string(value) + "'");
    } else if (arg == "--size") {
      size_text = value;
    } else if (arg == "--iters") {
      options.iters = parse_count(value, "--iters");
    } else if (arg == "--warmup") {
      options.warmup = static_cast<std::int64_t>(parse_count(value, "--warmup"));
    } else if (arg == "--window") {
      options.window = static_cast<std::uint32_t>(parse_count(value, "--window"));
    } else if (arg == "--cq-mod") {
      options.cq_mod = static_cast<std::uint32_t>(parse_count(value, "--cq-mod"));
    } else if (arg == "--provider") {
      options.provider = value;
    } else if (arg == "--json") {
      options.json_path = value;
    } else if (arg == "--timeout") {
      options.timeout = std::chrono::seconds(parse_count(value, "--timeout"));
    } else if (arg == "--no-progress") {
      options.drive_progress = false;
    } else if (arg == "--heap") {
      options.allocate = false;
    } else if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else {
      usage_error("unknown option '" + std::string(arg) + "'");
    }
  }
  // Sizes are parsed last so that "--size all --mode write_bw" means bw's "all".
  if (!size_text.empty()) options.sizes = parse_sizes(size_text, options.mode);
  if (options.sizes.empty()) {
    options.sizes = options.mode == Mode::WriteLat ? std::vector<std::size_t>{8}
                                                   : powers_of_two(std::size_t{64} << 10, std::size_t{16} << 20);
  }
  if (options.iters == 1) usage_error("--iters must be at least 2");
  if (options.window == 0 || options.cq_mod == 0) usage_error("--window and --cq-mod must be positive");
  if (options.timeout.count() == 0) options.timeout = rdmx::core::timeout();
  return options;
}

// ---------------------------------------------------------------------------
// Bounded spinning. The clock is read only once a wait has lasted a while, so
// the fast path of a ping-pong costs no time stamps; at the same cadence the
// QP is checked, so a dead peer ends the wait at once rather than at the timeout.
class SpinBudget {
 public:
  SpinBudget(const rdmx::QueuePair& qp, std::chrono::milliseconds timeout, const char* what)
      : qp_(qp), timeout_(timeout), what_(what) {}
  void tick() {
    if ((++spins_ & 0xfff) != 0) return;
    if (qp_.state() == rdmx::QpState::Error) {
      throw Error(ErrorCode::PeerFailure, std::string("queue pair failed while waiting for ") + what_ + ": " +
                                              qp_.error_reason(),
                  {.op = "rdmx_perf"});
    }
    const auto now = Clock::now();
    if (!started_) {
      deadline_ = now + timeout_;
      started_ = true;
    } else if (now > deadline_) {
      throw Error(ErrorCode::Timeout, std::string("gave up waiting for ") + what_ + " after " +
                                          std::to_string(timeout_.count()) + " ms",
                  {.op = "rdmx_perf", .hint = "is the peer alive? raise --timeout or RDMX_TIMEOUT"});
    }
  }

 private:
  const rdmx::QueuePair& qp_;
  std::chrono::milliseconds timeout_;
  const char* what_;
  std::uint64_t spins_ = 0;
  bool started_ = false;
  Clock::time_point deadline_{};
};

void check_completion(const rdmx::WorkCompletion& wc, const rdmx::QueuePair& qp) {
  if (wc.status != rdmx::WcStatus::Success) {
    throw Error(ErrorCode::PeerFailure, std::string("work request ") + std::to_string(wc.wr_id) + " completed with " +
                                            rdmx::to_string(wc.status) + ": " + qp.error_reason(),
                {.op = "rdmx_perf"});
  }
}

// Everything one rank needs to run a benchmark, set up once.
struct Session {
  Options options;
  rdmx::Bootstrap job;
  int rank = -1;
  int peer = -1;
  std::shared_ptr<rdmx::Device> device;
  std::unique_ptr<rdmx::ProtectionDomain> pd;
  std::unique_ptr<rdmx::CompletionQueue> cq;
  std::unique_ptr<rdmx::QueuePair> qp;
  // [0, area) is written by the peer; [area, 2*area) is what we send.
  std::size_t area = 0;
  std::unique_ptr<std::uint8_t[]> heap;
  std::uint8_t* buffer_base = nullptr;
  std::unique_ptr<rdmx::MemoryRegion> mr;
  std::uint64_t peer_addr = 0;  // the peer's receive area
  std::uint32_t peer_rkey = 0;
  int barrier_count = 0;

  std::uint8_t* receive_area() { return buffer_base; }
  std::uint8_t* send_area() { return buffer_base + area; }

  // Both ranks arrive before either leaves; bounded by the store's timeout.
  void barrier(const char* name) {
    const std::string phase = "rdmx_perf/barrier/" + std::to_string(barrier_count++) + "/" + name + "/";
    job.store->set(phase + std::to_string(rank), std::string_view("1"));
    job.store->wait({phase + std::to_string(peer)}, options.timeout);
  }

  void drive() {
    if (options.drive_progress) device->progress();
  }
};

void set_up(Session& s) {
  s.job = rdmx::from_env();
  s.rank = s.job.info.rank;
  if (s.job.info.world_size != 2) {
    throw Error(ErrorCode::Config, "rdmx_perf runs with exactly 2 ranks, got " + std::to_string(s.job.info.world_size),
                {.hint = "launch with RDMX_WORLD_SIZE=2 (bench/run_tcp.sh does)"});
  }
  s.peer = 1 - s.rank;
  s.device = rdmx::open_device(s.options.provider);
  const rdmx::DeviceCaps caps = s.device->caps();
  s.area = *std::max_element(s.options.sizes.begin(), s.options.sizes.end());
  if (caps.max_msg_size != 0 && s.area > caps.max_msg_size) {
    throw Error(ErrorCode::InvalidArgument, "size " + std::to_string(s.area) + " exceeds the provider's max_msg_size " +
                                                std::to_string(caps.max_msg_size));
  }
  // Unsignaled WRs hold their send-queue slots until a later signaled one completes.
  rdmx::QpCaps qp_caps;
  qp_caps.max_send_wr = std::max<std::uint32_t>(qp_caps.max_send_wr, 2 * (s.options.window + s.options.cq_mod));
  if (caps.max_qp_wr != 0) qp_caps.max_send_wr = std::min(qp_caps.max_send_wr, caps.max_qp_wr);
  qp_caps.max_recv_wr = 16;
  s.pd = s.device->alloc_pd();
  s.cq = s.device->create_cq(std::max<std::size_t>(256, 2 * s.options.window));
  s.qp = s.device->create_qp(*s.pd, *s.cq, *s.cq, qp_caps);
  const rdmx::Access access = rdmx::Access::LocalWrite | rdmx::Access::RemoteWrite;
  if (s.options.allocate) {
    s.mr = s.pd->allocate_memory(2 * s.area, access);
    s.buffer_base = static_cast<std::uint8_t*>(s.mr->addr());
    std::memset(s.buffer_base, 0, 2 * s.area);  // every page touched before timing
  } else {
    s.heap = std::make_unique<std::uint8_t[]>(2 * s.area);  // zeroed, so every page is touched
    s.buffer_base = s.heap.get();
    s.mr = s.pd->register_memory(s.buffer_base, 2 * s.area, access);
  }

  const std::string me = std::to_string(s.rank);
  const std::string them = std::to_string(s.peer);
  s.job.store->set("rdmx_perf/qp/" + me, s.qp->local_address().to_hex());
  s.job.store->set("rdmx_perf/buffer/" + me, std::to_string(reinterpret_cast<std::uint64_t>(s.receive_area())) + " " +
                                                 std::to_string(s.mr->rkey()));
  s.qp->connect(rdmx::QpAddress::from_hex(s.job.store->get_string("rdmx_perf/qp/" + them)), {.peer_rank = s.peer});
  const std::string record = s.job.store->get_string("rdmx_perf/buffer/" + them);
  unsigned long long addr = 0;
  unsigned rkey = 0;
  if (std::sscanf(record.c_str(), "%llu %u", &addr, &rkey) != 2) {
    throw Error(ErrorCode::Protocol, "malformed buffer record '" + record + "' from rank " + them);
  }
  s.peer_addr = addr;
  s.peer_rkey = rkey;
}

// ---------------------------------------------------------------------------
// Output, in perftest's columns.
void print_rule() {
  std::printf("---------------------------------------------------------------------------------------\n");
}

void print_banner(const Session& s, const char* title, std::uint32_t depth) {
  print_rule();
  std::printf("                    %s\n", title);
  std::printf(" Provider        : %s\n", s.device->provider().c_str());
  std::printf(" Device          : %s\n", s.device->name().c_str());
  std::printf(" Number of qps   : 1\t\tTransport type : rdmx RC\n");
  std::printf(" TX depth        : %u\n", depth);
  std::printf(" CQ Moderation   : %u\n", s.options.cq_mod);
  std::printf(" Progress        : %s\n", s.options.drive_progress ? "driven while spinning (Device::progress)"
                                                                   : "background engine only");
  std::printf(" Memory          : %s\n", s.options.allocate ? "ProtectionDomain::allocate_memory (shareable)"
                                                           : "heap, registered (--heap)");
  print_rule();
}

class JsonLines {
 public:
  explicit JsonLines(const std::string& path) {
    if (path.empty()) return;
    file_ = std::fopen(path.c_str(), "a");
    if (file_ == nullptr) {
      throw Error(ErrorCode::System, "cannot open --json file '" + path + "': " + std::strerror(errno));
    }
  }
  ~JsonLines() {
    if (file_ != nullptr) std::fclose(file_);
  }
  JsonLines(const JsonLines&) = delete;
  JsonLines& operator=(const JsonLines&) = delete;
  std::FILE* file() const { return file_; }

 private:
  std::FILE* file_ = nullptr;
};

// ---------------------------------------------------------------------------
// write_lat
struct LatencyStats {
  double min = 0, max = 0, typical = 0, average = 0, stdev = 0, p99 = 0, p999 = 0;
};

// `half_rtts` in microseconds; sorted in place.
LatencyStats summarize(std::vector<double>& half_rtts) {
  std::sort(half_rtts.begin(), half_rtts.end());
  const std::size_t n = half_rtts.size();
  LatencyStats stats;
  stats.min = half_rtts.front();
  stats.max = half_rtts.back();
  stats.typical = half_rtts[n / 2];
  double sum = 0;
  for (double v : half_rtts) sum += v;
  stats.average = sum / static_cast<double>(n);
  double square_sum = 0;
  for (double v : half_rtts) square_sum += (v - stats.average) * (v - stats.average);
  stats.stdev = std::sqrt(square_sum / static_cast<double>(n));
  auto percentile = [&](double fraction) {
    const auto index = static_cast<std::size_t>(std::ceil(fraction * static_cast<double>(n)));
    return half_rtts[std::min(n - 1, index == 0 ? 0 : index - 1)];
  };
  stats.p99 = percentile(0.99);
  stats.p999 = percentile(0.999);
  return stats;
}

// One ping-pong run of `total` exchanges; returns the post time of each.
// Timestamps on the ping-pong's critical path: the TSC where it is a stable
// clock (as perftest's get_cycles), 8 ns a read here against 19 ns for
// steady_clock::now(); converted with a rate measured against steady_clock.
#if defined(__x86_64__)
inline std::uint64_t ticks() { return __builtin_ia32_rdtsc(); }
#else
inline std::uint64_t ticks() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        Clock::now().time_since_epoch()).count());
}
#endif
double ns_per_tick() {
  static const double rate = [] {
#if defined(__x86_64__)
    const auto t0 = Clock::now();
    const std::uint64_t c0 = ticks();
    while (Clock::now() - t0 < std::chrono::milliseconds(50)) {
    }
    const std::uint64_t c1 = ticks();
    return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / static_cast<double>(c1 - c0);
#else
    return 1.0;
#endif
  }();
  return rate;
}

std::vector<std::uint64_t> ping_pong(Session& s, std::size_t size, std::uint64_t total) {
  ns_per_tick();  // calibrated before the clock matters
  std::vector<std::uint64_t> posted(total);
  std::memset(s.receive_area(), 0, size);
  const rdmx::Sge sge = s.mr->sge(s.area, static_cast<std::uint32_t>(size));
  rdmx::SendWr wr{.opcode = rdmx::Opcode::RdmaWrite, .sg_list = std::span(&sge, 1), .remote_addr = s.peer_addr,
                  .rkey = s.peer_rkey};
  const std::uint32_t signal_every = s.options.cq_mod;
  std::atomic_ref<std::uint8_t> arrived(s.receive_area()[size - 1]);
  std::uint8_t& outgoing = s.send_area()[size - 1];
  std::array<rdmx::WorkCompletion, 8> completions;
  std::uint64_t signaled_in_flight = 0;
  std::uint64_t sent = 0;
  std::uint64_t received = 0;
  const bool initiator = s.rank == 0;

  // Reaps signaled completions; blocks only when `keep_at_most` are left.
  auto reap = [&](std::uint64_t keep_at_most) {
    SpinBudget budget(*s.qp, s.options.timeout, "a signaled RDMA WRITE completion");
    for (;;) {
      const std::size_t n = s.cq->poll(completions);
      for (std::size_t i = 0; i < n; ++i) check_completion(completions[i], *s.qp);
      signaled_in_flight -= n;
      if (signaled_in_flight <= keep_at_most) return;
      s.drive();
      budget.tick();
    }
  };

  s.barrier("write_lat");
  while (sent < total || received < total) {
    // The initiator speaks first; then each side answers what it received.
    if (received < total && (sent > 0 || !initiator)) {
      ++received;
      const auto expected = static_cast<std::uint8_t>(received);
      SpinBudget budget(*s.qp, s.options.timeout, "the peer's RDMA WRITE");
      while (arrived.load(std::memory_order_acquire) != expected) {
        s.drive();
        budget.tick();
      }
    }
    if (sent < total) {
      posted[sent] = ticks();
      outgoing = static_cast<std::uint8_t>(++sent);
      wr.wr_id = sent;
      wr.signaled = sent % signal_every == 0 || sent == total;
      s.qp->post_send(wr);
      if (wr.signaled) ++signaled_in_flight;
      // Completions are reaped off the critical path; blocking only keeps the send queue from filling.
      if (signaled_in_flight > 0) reap(1);
    }
  }
  reap(0);
  return posted;
}

void run_write_lat(Session& s, JsonLines& json) {
  const std::uint64_t iters = s.options.iters != 0 ? s.options.iters : 10000;
  const auto warmup = static_cast<std::uint64_t>(s.options.warmup >= 0 ? s.options.warmup : 1000);
  if (s.rank == 0) {
    print_banner(s, "RDMA_Write Latency Test", 1);
    std::printf(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]"
                "   99%% percentile[usec]   99.9%% percentile[usec] \n");
  }
  for (const std::size_t size : s.options.sizes) {
    const std::vector<std::uint64_t> posted = ping_pong(s, size, warmup + iters);
    // As ib_write_lat: consecutive posts are one round trip apart; report half.
    std::vector<double> half_rtts;
    half_rtts.reserve(iters - 1);
    for (std::uint64_t i = warmup + 1; i < posted.size(); ++i) {
      half_rtts.push_back(static_cast<double>(posted[i] - posted[i - 1]) * ns_per_tick() / 1000.0 / 2);
    }
    const LatencyStats st = summarize(half_rtts);
    if (s.rank == 0) {
      std::printf(" %-7zu %-10llu     %-7.2f        %-7.2f      %-7.2f            %-7.2f        %-7.2f          %-7.2f"
                  "                %-7.2f\n",
                  size, static_cast<unsigned long long>(iters), st.min, st.max, st.typical, st.average, st.stdev,
                  st.p99, st.p999);
      if (json.file() != nullptr) {
        std::fprintf(json.file(),
                     "{\"mode\":\"write_lat\",\"provider\":\"%s\",\"bytes\":%zu,\"iterations\":%llu,"
                     "\"progress\":%s,\"t_min_us\":%.3f,\"t_max_us\":%.3f,\"t_typical_us\":%.3f,\"t_avg_us\":%.3f,"
                     "\"t_stdev_us\":%.3f,\"p99_us\":%.3f,\"p999_us\":%.3f}\n",
                     s.device->provider().c_str(), size, static_cast<unsigned long long>(iters),
                     s.options.drive_progress ? "true" : "false", st.min, st.max, st.typical, st.average, st.stdev,
                     st.p99, st.p999);
        std::fflush(json.file());
      }
    }
  }
  if (s.rank == 0) print_rule();
}

// ---------------------------------------------------------------------------
// write_bw
std::uint8_t pattern_byte(std::size_t offset) { return static_cast<std::uint8_t>(offset % 251); }

// Enough iterations to move about 1 GiB per size, within perftest's usual range.
std::uint64_t default_bw_iters(std::size_t size) {
  return std::clamp<std::uint64_t>((std::uint64_t{1} << 30) / size, 64, 5000);
}

struct BwResult {
  double seconds = 0;
  double peak_bytes_per_second = 0;
};

// Rank 0: `count` WRITEs of `size` with at most `window` outstanding. With
// `final_imm`, the last one is a WRITE_WITH_IMM that tells rank 1 we are done.
BwResult stream_writes(Session& s, std::size_t size, std::uint64_t count, bool final_imm) {
  const std::uint32_t window = s.options.window;
  // A signal interval above the window would stall: nothing completes until it is reached.
  const std::uint32_t signal_every = std::min(s.options.cq_mod, window);
  const rdmx::Sge sge = s.mr->sge(s.area, static_cast<std::uint32_t>(size));
  rdmx::SendWr wr{.sg_list = std::span(&sge, 1), .remote_addr = s.peer_addr, .rkey = s.peer_rkey};
  std::array<rdmx::WorkCompletion, 16> completions;
  // (time, WRs completed by then) at each signaled completion, for the peak.
  std::vector<std::pair<Clock::time_point, std::uint64_t>> progress_marks;
  progress_marks.reserve(count / signal_every + 2);

  std::uint64_t posted = 0;
  std::uint64_t completed = 0;
  const auto start = Clock::now();
  progress_marks.emplace_back(start, 0);
  SpinBudget budget(*s.qp, s.options.timeout, "RDMA WRITE completions");
  while (completed < count) {
    while (posted < count && posted - completed < window) {
      ++posted;
      const bool last = posted == count;
      wr.wr_id = posted;  // a signaled completion covers every WR up to its id
      wr.opcode = last && final_imm ? rdmx::Opcode::RdmaWriteWithImm : rdmx::Opcode::RdmaWrite;
      wr.imm_data = static_cast<std::uint32_t>(size);
      wr.signaled = last || posted % signal_every == 0;
      s.qp->post_send(wr);
    }
    const std::size_t n = s.cq->poll(completions);
    if (n == 0) {
      s.drive();
      budget.tick();
      continue;
    }
    for (std::size_t i = 0; i < n; ++i) {
      check_completion(completions[i], *s.qp);
      completed = std::max(completed, completions[i].wr_id);
    }
    progress_marks.emplace_back(Clock::now(), completed);
  }
  BwResult result;
  result.seconds = std::chrono::duration<double>(progress_marks.back().first - start).count();
  // Peak: the best rate over any stretch of at least one window of WRs, so
  // completions that arrive in a burst do not count as infinite bandwidth.
  std::size_t later = 0;
  for (std::size_t earlier = 0; earlier < progress_marks.size(); ++earlier) {
    later = std::max(later, earlier + 1);
    while (later < progress_marks.size() && progress_marks[later].second - progress_marks[earlier].second < window) {
      ++later;
    }
    if (later == progress_marks.size()) break;
    const double span = std::chrono::duration<double>(progress_marks[later].first - progress_marks[earlier].first).count();
    const auto bytes = static_cast<double>((progress_marks[later].second - progress_marks[earlier].second) * size);
    if (span > 0) result.peak_bytes_per_second = std::max(result.peak_bytes_per_second, bytes / span);
  }
  const double average = static_cast<double>(count * size) / result.seconds;
  if (result.peak_bytes_per_second < average) result.peak_bytes_per_second = average;
  return result;
}

// Rank 1: waits for rank 0's closing WRITE_WITH_IMM, then checks the data.
void receive_writes(Session& s, std::size_t size) {
  rdmx::WorkCompletion wc;
  s.cq->wait(std::span(&wc, 1), s.options.timeout);
  check_completion(wc, *s.qp);
  if (wc.opcode != rdmx::WcOpcode::RecvRdmaWithImm || wc.imm_data != static_cast<std::uint32_t>(size)) {
    throw Error(ErrorCode::Protocol, std::string("expected WRITE_WITH_IMM(") + std::to_string(size) + "), got " +
                                         rdmx::to_string(wc.opcode) + " imm=" + std::to_string(wc.imm_data));
  }
  for (std::size_t i = 0; i < size; ++i) {
    if (s.receive_area()[i] != pattern_byte(i)) {
      throw Error(ErrorCode::Protocol, "write_bw: wrong byte at offset " + std::to_string(i) + " of a " +
                                           std::to_string(size) + "-byte WRITE");
    }
  }
}

void run_write_bw(Session& s, JsonLines& json) {
  constexpr double kMiB = 1024.0 * 1024.0;
  for (std::size_t i = 0; i < s.area; ++i) s.send_area()[i] = pattern_byte(i);
  if (s.rank == 0) {
    print_banner(s, "RDMA_Write BW Test", s.options.window);
    std::printf(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]   BW average[GB/sec]\n");
  }
  for (const std::size_t size : s.options.sizes) {
    const std::uint64_t iters = s.options.iters != 0 ? s.options.iters : default_bw_iters(size);
    const auto warmup = static_cast<std::uint64_t>(s.options.warmup >= 0 ? s.options.warmup : s.options.window);
    if (s.rank == 1) {
      std::memset(s.receive_area(), 0, size);
      // A zero-length receive would do; one byte keeps to what every provider accepts.
      const rdmx::Sge scratch = s.mr->sge(s.area, 1);
      s.qp->post_recv({.wr_id = size, .sg_list = std::span(&scratch, 1)});
    }
    s.barrier("write_bw");
    if (s.rank == 0) {
      if (warmup > 0) stream_writes(s, size, warmup, false);
      const BwResult r = stream_writes(s, size, iters, true);
      const double bytes = static_cast<double>(iters * size);
      const double average = bytes / r.seconds;
      const double message_rate = static_cast<double>(iters) / r.seconds / 1e6;
      std::printf(" %-10zu %-10llu     %-13.2f      %-13.2f        %-10.6f      %-8.3f\n", size,
                  static_cast<unsigned long long>(iters), r.peak_bytes_per_second / kMiB, average / kMiB, message_rate,
                  average / 1e9);
      if (json.file() != nullptr) {
        std::fprintf(json.file(),
                     "{\"mode\":\"write_bw\",\"provider\":\"%s\",\"bytes\":%zu,\"iterations\":%llu,\"window\":%u,"
                     "\"bw_peak_mib_s\":%.3f,\"bw_avg_mib_s\":%.3f,\"msg_rate_mpps\":%.6f,\"bw_avg_gb_s\":%.4f}\n",
                     s.device->provider().c_str(), size, static_cast<unsigned long long>(iters), s.options.window,
                     r.peak_bytes_per_second / kMiB, average / kMiB, message_rate, average / 1e9);
        std::fflush(json.file());
      }
    } else {
      receive_writes(s, size);
    }
  }
  if (s.rank == 0) print_rule();
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    Session session;
    session.options = parse_options(argc, argv);
    set_up(session);
    JsonLines json(session.rank == 0 ? session.options.json_path : std::string());
    if (session.options.mode == Mode::WriteLat) {
      run_write_lat(session, json);
    } else {
      run_write_bw(session, json);
    }
    // Neither side tears its QP down while the other may still use it.
    session.barrier("end");
    return 0;
  } catch (const rdmx::Error& e) {
    std::fprintf(stderr, "rdmx_perf: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rdmx_perf: unexpected error: %s\n", e.what());
    return 1;
  }
}
