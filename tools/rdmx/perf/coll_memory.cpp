// SPDX-License-Identifier: MIT
// Local ranks share this host's memory, and every rank's communicator maps
// buffers for every peer it connects to (rdmx::comm_memory): 256 ranks that
// all connect everyone (all_to_all) at the default 4 MiB ask for over 512
// GiB, and the OOM killer would end ranks one by one. perf coll adds its own test buffers to the library's estimate and
// refuses before any rank starts, with the numbers.
#include "perf/coll_memory.hpp"

#include <algorithm>
#include <string>

#include "rdmx/comm.hpp"
#include "rdmx/error.hpp"
#include "report/svg_plot.hpp"

namespace rdmx::cli {
namespace {

// The process itself (code, stacks), twice what a rank of all_reduce at
// RDMX_COLL_BUFFSIZE=64K was seen to keep resident (docs/PERFORMANCE.md).
constexpr double kPerProcess = 16.0 * (1 << 20);

// The estimate's ring neighbours, and the peers beyond them the run connects.
double need(const CommMemory& m, int peers, double tests) {
  const int used = peers < 0 ? m.ranks - 1 : std::min(peers, m.ranks - 1);
  const double beyond = static_cast<double>(std::max(0, used - m.peers)) * static_cast<double>(m.per_peer);
  return m.local_ranks * (static_cast<double>(m.per_rank) + beyond + tests + kPerProcess);
}

}  // namespace

void refuse_local_ranks_beyond_memory(int ranks, int peers, std::size_t test_bytes, const char* command) {
  const CommMemory m = comm_memory(ranks, ranks);
  if (m.available == 0) return;  // nothing to compare with
  const double tests = static_cast<double>(test_bytes);
  const double available = static_cast<double>(m.available);
  if (need(m, peers, tests) <= available) return;

  // The most ranks that fit: the need grows with the ranks, so halve the range.
  int fit = 0;
  for (int low = 1, high = ranks - 1; low <= high;) {
    const int mid = low + (high - low) / 2;
    if (need(comm_memory(mid, mid), peers, tests) <= available) {
      fit = mid;
      low = mid + 1;
    } else {
      high = mid - 1;
    }
  }
  std::string hint = fit >= 2 ? "use fewer ranks: --np " + std::to_string(fit) + " fits"
                              : "use fewer ranks, or a host with more memory";
  if (m.fitting_buffsize != 0 && m.fitting_buffsize < m.buffsize) {
    hint += "; or lower RDMX_COLL_BUFFSIZE: the collectives' buffers fit at RDMX_COLL_BUFFSIZE=" +
            std::to_string(m.fitting_buffsize >> 10) + "K (large collectives then move in smaller pieces)";
  }
  throw Error(ErrorCode::InvalidArgument,
              "--np " + std::to_string(ranks) + ": " + std::to_string(ranks) + " local ranks need about " +
                  format_bytes(need(m, peers, tests)) + " of memory and this host has " + format_bytes(available) +
                  " available (" + m.available_from + "): each rank maps " +
                  format_bytes(static_cast<double>(m.per_peer)) + " for each of the " +
                  std::to_string(std::max(m.peers, peers < 0 ? ranks - 1 : std::min(peers, ranks - 1))) +
                  " peers it connects to (an inbox and a staging area of RDMX_COLL_BUFFSIZE=" +
                  format_bytes(static_cast<double>(m.buffsize)) + " and its share of the shm rings), plus " +
                  format_bytes(tests) + " of test buffers and about " + format_bytes(kPerProcess) + " for the process",
              {.op = command, .hint = hint});
}

}  // namespace rdmx::cli
