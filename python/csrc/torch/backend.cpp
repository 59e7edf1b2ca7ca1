// SPDX-License-Identifier: MIT
// The group's life (creation, split, abort, shutdown) and how a call is
// handed to the Communicator.
#include "backend.hpp"

#include <c10/core/GradMode.h>

#include <algorithm>

#include "cuda_side.hpp"
#include "gil.hpp"
#include "store_adapter.hpp"
#include "tensors.hpp"

#ifdef RDMX_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace rdmx::torch_backend {
namespace {

std::unique_ptr<Communicator> connect(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                      std::chrono::milliseconds timeout) {
  // After grow() or join_group(): the group they made, connected already.
  if (auto kept = take_pending_group(rank, size)) return kept;
  CommOptions options;
  options.timeout = timeout;
  options.tag = "rdmx";
  return Communicator::create(std::make_shared<TorchStore>(store), rank, size, options);
}

}  // namespace

ProcessGroupRdmx::ProcessGroupRdmx(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                   std::chrono::milliseconds timeout)
    : ProcessGroupRdmx(connect(store, rank, size, timeout), store, timeout) {}

ProcessGroupRdmx::ProcessGroupRdmx(std::unique_ptr<Communicator> comm, const c10::intrusive_ptr<c10d::Store>& store,
                                   std::chrono::milliseconds timeout)
    : c10d::Backend(comm->rank(), comm->size()),
      timeout_(timeout),
      options_(c10::make_intrusive<Options>("rdmx", timeout)),
      store_(store),
      comm_(std::move(comm)) {}

ProcessGroupRdmx::~ProcessGroupRdmx() {
  // Queued operations finish (each bounded by the timeout) before the
  // communicator goes; their futures' callbacks may be Python code.
  without_gil([&] { comm_.reset(); });
}

Communicator& ProcessGroupRdmx::communicator() const {
  if (!comm_) {
    throw Error(ErrorCode::InvalidState, "the rdmx process group was shut down",
                {.rank = getRank(), .hint = "create a new group (init_process_group or new_group)"});
  }
  return *comm_;
}

std::vector<std::string> ProcessGroupRdmx::peer_providers() const { return communicator().peer_providers(); }

uint64_t ProcessGroupRdmx::getSequenceNumberForGroup() { return communicator().next_sequence() - 1; }

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::issue(c10d::OpType type, std::vector<at::Tensor> outputs,
                                                       coll::Call call, bool async, const at::Tensor& device_of) {
  const bool cuda = device_of.defined() && device_of.is_cuda();
  c10::intrusive_ptr<RdmxWork> work;
  try {
    // Made here, on the caller's thread: the hooks below must not fail for it.
    const std::optional<c10::Stream> side =
        cuda ? std::optional<c10::Stream>(side_stream(device_of.device())) : std::nullopt;
    work =
        c10::make_intrusive<RdmxWork>(getRank(), type, std::move(outputs),
                                      cuda ? std::vector<c10::Device>{device_of.device()} : std::vector<c10::Device>{});
    if (call.then) {
      // The copies out of staging tensors may write tensors that require
      // grad; on CUDA they land before the operation completes (cuda_side.hpp).
      call.then = [then = std::move(call.then), side] {
        c10::AutoGradMode no_grad(false);
        on_stream(side, then, true);
      };
    }
    // A CUDA work's future records its events on the side stream, whose work
    // has run by then: a waiter's stream waits for nothing more.
    call.done = [work, side](std::exception_ptr error) {
      on_stream(
          side, [&] { work->complete(std::move(error)); }, false);
    };
    Communicator& comm = communicator();
#ifdef RDMX_TORCH_CUDA
    if (cuda) comm.set_cuda_stream(c10::cuda::getCurrentCUDAStream(device_of.device().index()).stream());
#endif
    work->attach(coll::submit(comm, std::move(call), async));
  } catch (...) {
    std::rethrow_exception(torch_error(std::current_exception()));
  }
  if (coalescing_) coalesced_.push_back(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::issue_task(c10d::OpType type, std::vector<at::Tensor> outputs,
                                                            std::function<void()> fn, const char* what, bool async,
                                                            const std::vector<at::Tensor>& tensors) {
  c10::intrusive_ptr<RdmxWork> work;
  try {
    const std::optional<c10::Device> device = cuda_device_of(tensors);
    const std::optional<c10::Stream> side = device ? std::optional<c10::Stream>(side_stream(*device)) : std::nullopt;
    work = c10::make_intrusive<RdmxWork>(getRank(), type, std::move(outputs),
                                         device ? std::vector<c10::Device>{*device} : std::vector<c10::Device>{});
    // A task is a host function: it waits for the work queued on the
    // tensors' streams before the call, and its own copies run on the side
    // stream and have landed when it ends.
    auto mark = std::make_shared<const StreamMark>(tensors);
    const int rank = getRank();
    const std::chrono::milliseconds timeout = timeout_;
    // The task completes the Work itself, as a Call's `done` hook would.
    auto task = [work, fn = std::move(fn), mark, side, what, rank, timeout] {
      std::exception_ptr error;
      try {
        c10::AutoGradMode no_grad(false);
        mark->wait(timeout, what, rank);
        on_stream(side, fn, true);
      } catch (...) {
        error = std::current_exception();
      }
      on_stream(
          side, [&] { work->complete(error); }, false);
      if (error) std::rethrow_exception(error);
    };
    work->attach(coll::submit_task(communicator(), std::move(task), what, async));
  } catch (...) {
    std::rethrow_exception(torch_error(std::current_exception()));
  }
  return work;
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupRdmx::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                          const std::vector<int>& ranks,
                                                          const c10::intrusive_ptr<Options>&) {
  if (store && store == last_split_store_ && ranks == last_split_ranks_) return last_split_;
  const auto me = std::find(ranks.begin(), ranks.end(), getRank());
  // One color per new group: its lowest rank. The order of `ranks` is the
  // order of the new group's ranks, as torch numbers them.
  const int color = me == ranks.end() ? -1 : *std::min_element(ranks.begin(), ranks.end());
  const int key = me == ranks.end() ? 0 : static_cast<int>(me - ranks.begin());
  std::unique_ptr<Communicator> child;
  try {
    without_gil([&] { child = communicator().split(color, key); });
  } catch (...) {
    std::rethrow_exception(torch_error(std::current_exception()));
  }
  last_split_store_ = store;
  last_split_ranks_ = ranks;
  last_split_ = child ? c10::make_intrusive<ProcessGroupRdmx>(std::move(child), store, timeout_) : nullptr;
  return last_split_;
}

void ProcessGroupRdmx::abort() {
  if (comm_) comm_->abort("the process group was aborted on rank " + std::to_string(getRank()));
}

void ProcessGroupRdmx::shutdown() {
  without_gil([&] { comm_.reset(); });
}

}  // namespace rdmx::torch_backend
