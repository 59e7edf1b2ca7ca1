// SPDX-License-Identifier: MIT
// perf p2p's bandwidth tests: a window of operations outstanding, the bytes
// checked at the end (write_bw, read_bw, send_bw).
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

namespace rdmx::cli::perf_p2p {
namespace {

std::uint8_t pattern_byte(std::size_t offset) { return static_cast<std::uint8_t>(offset % 251); }

struct BwResult {
  double seconds = 0;
  double peak_bytes_per_second = 0;
};

// Rank 0: `count` operations of `size` with at most `window` outstanding.
BwResult stream(Session& s, const TestInfo& t, std::size_t size, std::uint64_t count, bool final_imm) {
  const std::uint32_t window = s.options.window;
  // A signal interval above the window would stall: nothing completes until
  // it is reached. And one past kSignalBytes would leave this rank without a
  // completion, so without a heartbeat, for as long as those bytes take:
  // 100 WRs of 1 GiB are 20 s at 5 GB/s, the peer's whole RDMX_TIMEOUT under make test.
  constexpr std::size_t kSignalBytes = std::size_t{256} << 20;
  const auto by_bytes =
      static_cast<std::uint32_t>(std::clamp<std::size_t>(kSignalBytes / std::max<std::size_t>(size, 1), 1, window));
  const std::uint32_t signal_every = std::max<std::uint32_t>(1, std::min({s.options.cq_mod, window, by_bytes}));
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
      if (read)
        wr.opcode = Opcode::RdmaRead;
      else if (t.test == Test::SendBw)
        wr.opcode = Opcode::Send;
      else
        wr.opcode = last && final_imm ? Opcode::RdmaWriteWithImm : Opcode::RdmaWrite;
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

// The receive area's first `size` bytes, read back through the driver from device memory.
void check_pattern(Session& s, std::size_t size, const char* what) {
  std::vector<std::uint8_t> copy;
  const std::uint8_t* data = s.receive_area();
  if (s.gpu != nullptr) {
    copy.resize(size);
    s.read_bytes(0, copy.data(), size);
    data = copy.data();
  }
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] != pattern_byte(i)) {
      throw Error(ErrorCode::Protocol,
                  std::string(what) + ": wrong byte at offset " + std::to_string(i) + " of " + std::to_string(size) +
                      " (got " + std::to_string(data[i]) + ", expected " + std::to_string(pattern_byte(i)) + ")",
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

}  // namespace

json run_bandwidth(Session& s, const TestInfo& t, std::size_t size) {
  constexpr double kMiB = 1024.0 * 1024.0;
  const std::uint64_t iters = s.options.iters != 0 ? s.options.iters : default_bw_iters(size, s.options.volume);
  const auto warmup = static_cast<std::uint64_t>(s.options.warmup >= 0 ? s.options.warmup : s.options.window);
  s.zero(0, size);
  std::vector<std::uint8_t> pattern(size);
  for (std::size_t i = 0; i < size; ++i) pattern[i] = pattern_byte(i);
  s.write_bytes(s.area, pattern.data(), size);
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
        throw Error(ErrorCode::Protocol,
                    std::string("expected WRITE_WITH_IMM(") + std::to_string(size) + "), got " + to_string(wc.opcode) +
                        " imm=" + std::to_string(wc.imm_data),
                    {.op = "perf p2p write_bw", .peer_rank = s.peer});
      }
      check_pattern(s, size, "write_bw: the data rank 0 wrote");
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
    check_pattern(s, size, "read_bw: the data read from rank 1");
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

}  // namespace rdmx::cli::perf_p2p
