// SPDX-License-Identifier: MIT
// Going on after a rank dies, and growing back: torch's shrink_group over
// rdmx's shrink(), and grow/join kept for the next init_process_group
// (docs/TORCH.md, "Keeping training when a rank dies").
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <mutex>

#include "backend.hpp"
#include "gil.hpp"
#include "store_adapter.hpp"
#include "work.hpp"

namespace rdmx::torch_backend {
namespace {

std::string list(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return "[" + out + "]";
}

// The communicator grow() or join_group() made, until a group takes it.
std::mutex pending_mutex;
std::unique_ptr<Communicator> pending;
std::string pending_tag;

// Keeps `comm` (a grown group, this process's place in it) and returns a
// store prefix its ranks share and no earlier group used: the number rank 0
// drew from `store`, broadcast over the new communicator itself.
std::tuple<int, int, std::string> keep(std::unique_ptr<Communicator> comm, Store& store) {
  std::int64_t id = 0;
  if (comm->rank() == 0) id = store.add("rdmx/regroups", 1);
  comm->broadcast(&id, 1, DataType::Int64, 0);
  std::lock_guard<std::mutex> lock(pending_mutex);
  pending = std::move(comm);
  pending_tag = "rdmx-regroup-" + std::to_string(id) + "/";
  return {pending->rank(), pending->size(), pending_tag};
}

}  // namespace

std::vector<int> ProcessGroupRdmx::agree_failures() {
  try {
    return without_gil([&] { return communicator().agree_failures(); });
  } catch (...) {
    std::rethrow_exception(torch_error(std::current_exception()));
  }
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupRdmx::shrink(const std::vector<int64_t>& ranks_to_exclude, int,
                                                           const c10::intrusive_ptr<Options>&) {
  ShrinkResult result;
  try {
    result = without_gil([&] { return communicator().shrink(); });
  } catch (...) {
    std::rethrow_exception(torch_error(std::current_exception()));
  }
  std::vector<int> asked(ranks_to_exclude.begin(), ranks_to_exclude.end());
  std::sort(asked.begin(), asked.end());
  if (asked != result.failed) {
    // torch numbers the new group from the list it was given: another
    // list than the survivors' would give ranks that are not theirs.
    throw c10::DistBackendError("rdmx: shrink_group was asked to exclude ranks " + list(asked) +
                                ", but the survivors agreed that ranks " + list(result.failed) +
                                " failed; pass rdmx.torch.agree_failures() to shrink_group");
  }
  // Its own prefix: the old group's monitoredBarrier keys stay in the store.
  auto store = c10::make_intrusive<c10d::PrefixStore>(
      "shrunk" + std::to_string(result.communicator->size()) + "-" + list(result.survivors), store_);
  return c10::make_intrusive<ProcessGroupRdmx>(std::move(result.communicator), store, timeout_);
}

std::tuple<int, int, std::string> ProcessGroupRdmx::grow(int count, const c10::intrusive_ptr<c10d::Store>& store) {
  try {
    auto shared = std::make_shared<TorchStore>(store);
    return without_gil([&] { return keep(communicator().grow(count, shared), *shared); });
  } catch (...) {
    std::rethrow_exception(torch_error(std::current_exception()));
  }
}

std::tuple<int, int, std::string> join_group(const c10::intrusive_ptr<c10d::Store>& store, const std::string& tag,
                                             std::chrono::milliseconds timeout) {
  try {
    CommOptions options;
    options.tag = tag;
    options.timeout = timeout;
    auto shared = std::make_shared<TorchStore>(store);
    return without_gil([&] { return keep(Communicator::join(shared, options), *shared); });
  } catch (...) {
    std::rethrow_exception(torch_error(std::current_exception()));
  }
}

std::unique_ptr<Communicator> take_pending_group(int rank, int size) {
  std::lock_guard<std::mutex> lock(pending_mutex);
  if (!pending || pending->rank() != rank || pending->size() != size) return nullptr;
  return std::move(pending);
}

}  // namespace rdmx::torch_backend
