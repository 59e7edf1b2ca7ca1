// SPDX-License-Identifier: MIT
// rdmx perf p2p's parts: the tests, the options, the session both ranks set
// up once, and the latency and bandwidth tests run on it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/options.hpp"
#include "perf/gpu.hpp"
#include "perf/perf_liveness.hpp"
#include "rdmx/bootstrap.hpp"
#include "rdmx/verbs.hpp"

namespace rdmx::cli::perf_p2p {

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
  bool allocate =
      true;  // buffers from allocate_memory (as ucx_perftest maps with ucp_mem_map); --heap: registered heap
  std::string memory = "host";
  bool cuda = false;  // --memory cuda: the buffers are device memory of one GPU
  int gpu = -1;       // --gpu; -1: the local rank modulo the GPU count
  double timeout_s = 0;
  std::string volume_text;                    // --volume as given
  std::size_t volume = std::size_t{1} << 30;  // bandwidth: bytes to move per size when -n is not given
};

// perftest's defaults: 2 bytes and 1000 iterations for latency, 64 KiB for bandwidth.
constexpr std::size_t kDefaultLatencySize = 2;
constexpr std::size_t kDefaultBandwidthSize = 65536;
constexpr std::uint64_t kDefaultLatencyIters = 1000;
constexpr std::uint64_t kDefaultLatencyWarmup = 100;

// Enough iterations to move `volume` bytes (default 1 GiB) per size, within perftest's usual range.
std::uint64_t default_bw_iters(std::size_t size, std::size_t volume);

// Throws naming `what` when `wc` failed.
void check_completion(const WorkCompletion& wc, const QueuePair& qp, const char* what);

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
  // [2 area, 2 area + 64): the atomic target (8 bytes).
  // Host memory, or with --memory cuda device memory of `gpu`, which the CPU
  // reaches only through the driver (write_bytes, read_bytes, zero).
  std::size_t area = 0;
  gpu::Gpu* gpu = nullptr;
  std::unique_ptr<std::uint8_t[]> heap;
  std::unique_ptr<gpu::DeviceBuffer> device_buffer;  // declared before `mr`: freed after it deregisters
  std::uint8_t* base = nullptr;
  std::unique_ptr<MemoryRegion> mr;
  std::uint64_t peer_base = 0;
  std::uint32_t peer_rkey = 0;
  // Host memory the CPU polls in every mode: [0, 8) the done token, [8, 16)
  // the value this rank WRITEs as its peer's token.
  std::unique_ptr<MemoryRegion> control;
  std::uint64_t peer_control = 0;
  std::uint32_t peer_control_rkey = 0;
  int barrier_count = 0;
  std::uint64_t done_tokens = 0;
  // Rank 0 shows progress through it; rank 1 consults it before giving up.
  std::unique_ptr<Heartbeat> heartbeat;

  std::uint8_t* receive_area() { return base; }
  std::uint8_t* send_area() { return base + area; }
  std::size_t control_offset() const { return 2 * area; }
  // Copies into, out of, or zeroes [offset, offset + bytes) of the buffer,
  // through the driver for device memory; landed on return.
  void write_bytes(std::size_t offset, const void* src, std::size_t bytes);
  void read_bytes(std::size_t offset, void* dst, std::size_t bytes);
  void zero(std::size_t offset, std::size_t bytes);

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

// The passive side of one-sided tests: drives progress until rank 0's done
// token lands (or, with --no-progress, leaves the work to the background engine).
void serve_until_done(Session& s);
void send_done_token(Session& s);

// One row of a test (perf_p2p_latency.cpp, perf_p2p_bandwidth.cpp).
nlohmann::json run_latency(Session& s, const TestInfo& t, std::size_t size);
nlohmann::json run_bandwidth(Session& s, const TestInfo& t, std::size_t size);

}  // namespace rdmx::cli::perf_p2p
