// SPDX-License-Identifier: MIT
// perf p2p's latency tests: ping-pongs (write_lat, send_lat, RTT/2) and
// one-sided operations timed one at a time (read_lat, atomic_lat).
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

std::vector<double> ping_pong(Session& s, const TestInfo& t, std::size_t size, std::uint64_t total) {
  ns_per_tick();  // calibrated before the clock matters
  std::vector<std::uint64_t> posted(total);
  s.zero(0, size);
  const bool use_send = t.test == Test::SendLat;
  // The CPU does not read device memory: there a WRITE carries an immediate,
  // and its receive completion tells that the data landed.
  const bool by_completion = use_send || s.gpu != nullptr;
  const Sge sge = s.mr->sge(s.area, static_cast<std::uint32_t>(size));
  const Sge recv_sge = s.mr->sge(0, static_cast<std::uint32_t>(size));
  SendWr wr{.opcode = use_send        ? Opcode::Send
                      : by_completion ? Opcode::RdmaWriteWithImm
                                      : Opcode::RdmaWrite,
            .sg_list = std::span(&sge, 1),
            .remote_addr = s.peer_base,
            .rkey = s.peer_rkey};
  constexpr std::uint64_t kRecvDepth = 16;
  if (by_completion) {
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
      if (by_completion) {
        WorkCompletion wc;
        SpinBudget budget(*s.qp, s.timeout, use_send ? "the peer's SEND" : "the peer's RDMA WRITE with immediate");
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
      ++sent;
      if (!by_completion) outgoing = static_cast<std::uint8_t>(sent);
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
      s.read_bytes(0, &original, 8);
      if (original != target_value) {
        throw Error(ErrorCode::Protocol,
                    std::string(t.name) + ": the atomic returned " + std::to_string(original) + ", expected " +
                        std::to_string(target_value),
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
  return {{"bytes", size},          {"iterations", iters},        {"t_min_us", st.min},
          {"t_max_us", st.max},     {"t_typical_us", st.typical}, {"t_avg_us", st.average},
          {"t_stdev_us", st.stdev}, {"p99_us", st.p99},           {"p999_us", st.p999}};
}

}  // namespace rdmx::cli::perf_p2p
