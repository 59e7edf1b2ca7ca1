// SPDX-License-Identifier: MIT
#include "cuda_side.hpp"

#include <algorithm>
#include <array>
#include <mutex>
#include <thread>

#include "rdmx/error.hpp"

#ifdef RDMX_TORCH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace rdmx::torch_backend {

#ifdef RDMX_TORCH_CUDA

c10::Stream side_stream(c10::Device device) {
  // Non-blocking: not ordered with the legacy default stream, which may be a
  // caller's stream held by an operation's wait.
  static std::mutex mutex;
  static std::array<cudaStream_t, C10_COMPILE_TIME_MAX_GPUS> streams{};
  const c10::DeviceIndex index = device.index() < 0 ? c10::cuda::current_device() : device.index();
  std::lock_guard lock(mutex);
  cudaStream_t& stream = streams.at(static_cast<std::size_t>(index));
  if (stream == nullptr) {
    c10::cuda::CUDAGuard guard(index);
    const cudaError_t result = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (result != cudaSuccess) {
      stream = nullptr;
      throw Error(ErrorCode::System,
                  std::string("cudaStreamCreateWithFlags on cuda:") + std::to_string(index) +
                      " failed: " + cudaGetErrorString(result),
                  {.op = "torch backend", .hint = "the rdmx backend copies CUDA tensors on a stream of its own"});
    }
  }
  return c10::cuda::getStreamFromExternal(stream, index);
}

void on_stream(const std::optional<c10::Stream>& side, const std::function<void()>& fn, bool settle) {
  if (!side) {
    fn();
    return;
  }
  c10::cuda::CUDAStreamGuard guard(c10::cuda::CUDAStream(c10::cuda::CUDAStream::UNCHECKED, *side));
  fn();
  if (settle) c10::cuda::getCurrentCUDAStream(side->device_index()).synchronize();
}

void settle(const at::Tensor& t) {
  if (t.defined() && t.is_cuda()) c10::cuda::getCurrentCUDAStream(t.device().index()).synchronize();
}

StreamMark::StreamMark(const std::vector<at::Tensor>& tensors) {
  std::vector<c10::DeviceIndex> seen;
  for (const auto& t : tensors) {
    if (!t.defined() || !t.is_cuda()) continue;
    const c10::DeviceIndex index = t.device().index();
    if (std::find(seen.begin(), seen.end(), index) != seen.end()) continue;
    seen.push_back(index);
    c10::Event event(c10::DeviceType::CUDA);
    event.record(c10::cuda::getCurrentCUDAStream(index));
    events_.push_back(std::move(event));
  }
}

void StreamMark::wait(std::chrono::milliseconds timeout, const char* op, int rank) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // A CUDA event cannot be waited for with a deadline: it is polled, first
  // briefly, then with sleeps growing to a millisecond, so a long kernel
  // ahead of the call does not keep a core busy.
  auto pause = std::chrono::microseconds(0);
  for (const auto& event : events_) {
    while (!event.query()) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw Error(ErrorCode::Timeout,
                    std::string(op) + ": the work queued on the CUDA stream of " + event.device().str() +
                        " before the call did not finish in time",
                    {.op = op,
                     .rank = rank,
                     .hint = "the operation reads tensors that work may write; raise the group's timeout or look "
                             "for a kernel that never ends"});
      }
      if (pause.count() == 0) {
        std::this_thread::yield();
        pause = std::chrono::microseconds(1);
      } else {
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(1000));
      }
    }
  }
}

#else

c10::Stream side_stream(c10::Device device) {
  throw Error(ErrorCode::NotSupported, "this rdmx backend was built without CUDA, not for " + device.str(),
              {.op = "torch backend", .hint = "build rdmx against a CUDA build of torch"});
}

void on_stream(const std::optional<c10::Stream>&, const std::function<void()>& fn, bool) { fn(); }

void settle(const at::Tensor&) {}

StreamMark::StreamMark(const std::vector<at::Tensor>&) {}

void StreamMark::wait(std::chrono::milliseconds, const char*, int) const {}

#endif

std::optional<c10::Device> cuda_device_of(const std::vector<at::Tensor>& tensors) {
  for (const auto& t : tensors) {
    if (t.defined() && t.is_cuda()) return t.device();
  }
  return std::nullopt;
}

}  // namespace rdmx::torch_backend
