// SPDX-License-Identifier: MIT
#include "coll/cuda/stream_order.hpp"

#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include "services/cuda/context.hpp"
#include "services/cuda/driver.hpp"
#include "services/cuda/per_gpu.hpp"
#include "services/mutex.hpp"
#include "services/wait.hpp"

namespace rdmx::coll {
namespace cu = core::cuda;

namespace {

// Pinned host pages of release words, per GPU, for the life of the process:
// a stream may still be polling a word after its communicator is gone, so
// the memory is never freed; words are reused by later communicators, going
// on counting from where the last one left them.
class WordPool {
 public:
  explicit WordPool(int gpu) : gpu_(gpu) {}
  std::uint32_t* take(cu::CUdeviceptr* device) {
    core::LockGuard lock(mutex_);
    if (free_.empty()) grow();
    std::uint32_t* word = free_.back();
    free_.pop_back();
    *device = device_of(word);
    return word;
  }
  void give_back(std::uint32_t* word) {
    core::LockGuard lock(mutex_);
    free_.push_back(word);
  }

 private:
  static constexpr std::size_t kPage = 4096;
  void grow() RDMX_REQUIRES(mutex_) {
    const cu::DriverApi& api = cu::require_driver("stream ordering");
    const ErrorContext where{.op = "stream ordering", .sizes = "gpu=" + std::to_string(gpu_)};
    cu::ContextScope scope(api, cu::primary_context(api, gpu_));
    void* page = nullptr;
    cu::check(api, api.cuMemAllocHost_v2(&page, kPage), "cuMemAllocHost", where);
    cu::CUdeviceptr device = 0;
    cu::check(api, api.cuMemHostGetDevicePointer_v2(&device, page, 0), "cuMemHostGetDevicePointer", where);
    pages_.push_back({static_cast<std::uint32_t*>(page), device});
    auto* words = static_cast<std::uint32_t*>(page);
    for (std::size_t i = 0; i < kPage / sizeof(std::uint32_t); ++i) {
      words[i] = 0;
      free_.push_back(words + i);
    }
  }
  cu::CUdeviceptr device_of(std::uint32_t* word) const RDMX_REQUIRES(mutex_) {
    for (const auto& [host, device] : pages_) {
      if (word >= host && word < host + kPage / sizeof(std::uint32_t)) {
        return device + static_cast<cu::CUdeviceptr>((word - host) * sizeof(std::uint32_t));
      }
    }
    return 0;
  }

  int gpu_;
  core::Mutex mutex_;
  std::vector<std::pair<std::uint32_t*, cu::CUdeviceptr>> pages_ RDMX_GUARDED_BY(mutex_);
  std::vector<std::uint32_t*> free_ RDMX_GUARDED_BY(mutex_);
};

WordPool& pool(int gpu) {
  static cu::PerGpu<std::unique_ptr<WordPool>> pools;
  return *pools.get(gpu, "stream ordering", [gpu] { return std::make_unique<WordPool>(gpu); });
}

}  // namespace

struct StreamSlot {
  int gpu;
  std::uint32_t* word;
  cu::CUdeviceptr device;
  StreamSlot(int g) : gpu(g), word(pool(g).take(&device)) {}
  ~StreamSlot() { pool(gpu).give_back(word); }
  // Raises the word to `value` unless a later release got there first.
  void release(std::uint32_t value) noexcept {
    std::atomic_ref<std::uint32_t> w(*word);
    std::uint32_t now = w.load(std::memory_order_relaxed);
    while (static_cast<std::int32_t>(value - now) > 0 &&
           !w.compare_exchange_weak(now, value, std::memory_order_release, std::memory_order_relaxed)) {
    }
  }
};

StreamTicket::StreamTicket(StreamTicket&& other) noexcept
    : slot_(std::move(other.slot_)), value_(other.value_), inputs_(std::exchange(other.inputs_, nullptr)) {}

StreamTicket& StreamTicket::operator=(StreamTicket&& other) noexcept {
  if (this != &other) {
    release();
    slot_ = std::move(other.slot_);
    value_ = other.value_;
    inputs_ = std::exchange(other.inputs_, nullptr);
  }
  return *this;
}

void StreamTicket::wait_for_inputs(std::chrono::steady_clock::time_point deadline, const char* op) {
  if (inputs_ == nullptr) return;
  const cu::DriverApi& api = cu::require_driver(op);
  cu::CUresult result = cu::kErrorNotReady;
  const auto outcome = core::wait_until(
      [&] {
        result = api.cuEventQuery(inputs_);
        return result != cu::kErrorNotReady;
      },
      nullptr, deadline);
  const std::string gpu = "gpu=" + std::to_string(slot_->gpu);
  const ErrorContext where{.op = op, .sizes = gpu};
  if (outcome == core::WaitResult::Aborted) {
    throw Error(ErrorCode::InvalidState, "waits were aborted while the operation waited for its CUDA stream", where);
  }
  if (outcome == core::WaitResult::Timeout) {
    throw Error(ErrorCode::Timeout, "the work queued on the CUDA stream before the operation did not finish in time",
                {.op = op,
                 .sizes = gpu,
                 .hint = "the operation reads buffers that work may write; raise RDMX_TIMEOUT or look for a "
                         "kernel that never ends"});
  }
  cu::check(api, result, "cuEventQuery", where);
}

void StreamTicket::release() noexcept {
  if (slot_ == nullptr) return;
  slot_->release(value_);
  if (inputs_ != nullptr) {
    if (const cu::DriverApi* api = cu::driver_if_loaded(); api != nullptr) api->cuEventDestroy_v2(inputs_);
    inputs_ = nullptr;
  }
  slot_.reset();
}

StreamTicket StreamOrder::enter(void* stream, int gpu, const char* op) {
  const cu::DriverApi& api = cu::require_driver(op);
  const ErrorContext where{.op = op, .sizes = "gpu=" + std::to_string(gpu), .hint = "is the stream on this GPU?"};
  if (slot_ == nullptr || slot_->gpu != gpu) {
    // Tickets hold their slot: a word goes back to the pool, for another
    // communicator to go on counting from, only once its last ticket is released.
    slot_ = std::make_shared<StreamSlot>(gpu);
    next_ = std::atomic_ref<std::uint32_t>(*slot_->word).load(std::memory_order_acquire);
  }
  cu::ContextScope scope(api, cu::primary_context(api, gpu));
  auto* s = static_cast<cu::CUstream>(stream);
  // Released by its destructor if a step below throws (raising a word that
  // nothing waits on yet is harmless).
  StreamTicket ticket;
  ticket.slot_ = slot_;
  ticket.value_ = ++next_;
  cu::check(api, api.cuEventCreate(&ticket.inputs_, cu::kEventDisableTiming), "cuEventCreate", where);
  cu::check(api, api.cuEventRecord(ticket.inputs_, s), "cuEventRecord", where);
  cu::check(api, api.cuStreamWaitValue32_v2(s, slot_->device, ticket.value_, cu::kStreamWaitValueGeq),
            "cuStreamWaitValue32", where);
  return ticket;
}

}  // namespace rdmx::coll
