// SPDX-License-Identifier: MIT
// monitored_barrier: a barrier through the group's store, bounded by its
// own timeout, that names the ranks which did not arrive (Gloo's, which
// torch offers for debugging hangs). Through the store rather than the
// Communicator so that a late rank leaves the group usable.
#include <thread>

#include "backend.hpp"

namespace rdmx::torch_backend {
namespace {

std::string join(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

bool arrived(const c10::intrusive_ptr<c10d::Store>& store, const std::string& key, std::chrono::milliseconds left) {
  if (left <= std::chrono::milliseconds(0)) return store->check({key});
  try {
    store->wait({key}, left);
    return true;
  } catch (const c10::Error&) {
    return store->check({key});
  }
}

}  // namespace

void ProcessGroupRdmx::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  using namespace std::chrono;
  const milliseconds timeout = opts.timeout.count() > 0 ? opts.timeout : timeout_;
  if (!store_) {
    throw c10::DistBackendError("monitored_barrier: this rdmx group has no store to meet through");
  }
  const std::string prefix = "rdmx/monitored_barrier/" + std::to_string(++monitored_barriers_) + "/";
  const auto deadline = steady_clock::now() + timeout;
  auto left = [&] { return duration_cast<milliseconds>(deadline - steady_clock::now()); };
  const std::string release = prefix + "release";
  if (getRank() != 0) {
    store_->set(prefix + std::to_string(getRank()), std::vector<uint8_t>{1});
    // Rank 0 may take the whole timeout to find a rank missing: wait as
    // long again for its verdict.
    if (!arrived(store_, release, left() + timeout)) {
      throw c10::DistBackendError("monitored_barrier: rank " + std::to_string(getRank()) +
                                  " was not released by rank 0 within " + std::to_string(2 * timeout.count()) +
                                  " ms (rank 0 is late or stuck)");
    }
    const std::vector<uint8_t> verdict = store_->get(release);
    if (verdict.size() > 1) {
      throw c10::DistBackendError("monitored_barrier on rank " + std::to_string(getRank()) + ": " +
                                  std::string(verdict.begin(), verdict.end()));
    }
    return;
  }
  std::vector<int> missing;
  for (int r = 1; r < getSize(); ++r) {
    if (!arrived(store_, prefix + std::to_string(r), left())) {
      missing.push_back(r);
      if (!wait_all_ranks) break;
    }
  }
  if (missing.empty()) {
    store_->set(release, std::vector<uint8_t>{1});
    return;
  }
  const std::string message = std::string(missing.size() == 1 ? "Rank " : "Ranks ") + join(missing) +
                              " failed to pass monitoredBarrier in " + std::to_string(timeout.count()) +
                              " ms (rdmx group of " + std::to_string(getSize()) + " ranks)";
  store_->set(release, std::vector<uint8_t>(message.begin(), message.end()));
  throw c10::DistBackendError(message);
}

}  // namespace rdmx::torch_backend
