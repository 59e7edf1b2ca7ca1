// SPDX-License-Identifier: MIT
#include "support/cuda_device.hpp"

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <memory>

#include "rdmx/error.hpp"
#include "rdmx/verbs.hpp"

namespace rdmx::test {

namespace cu = core::cuda;

const cu::DriverApi* cuda_for_test(std::string* why) {
  const cu::DriverLoad& load = cu::load_driver();
  if (load.api == nullptr) {
    *why = load.reason;
    return nullptr;
  }
  const cu::DriverApi& api = *load.api;
  cu::CUdevice device = 0;
  cu::CUcontext context = nullptr;
  cu::check(api, api.cuDeviceGet(&device, 0), "cuDeviceGet", {.op = "test setup"});
  cu::check(api, api.cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain", {.op = "test setup"});
  cu::check(api, api.cuCtxSetCurrent(context), "cuCtxSetCurrent", {.op = "test setup"});
  return &api;
}

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  std::string why;
  const cu::DriverApi* api = cuda_for_test(&why);
  if (api == nullptr) throw Error(ErrorCode::NotSupported, "no GPU: " + why, {.op = "DeviceBuffer"});
  cu::check(*api, api->cuMemAlloc_v2(&pointer_, bytes), "cuMemAlloc",
            {.op = "DeviceBuffer", .sizes = std::to_string(bytes) + " B"});
}

DeviceBuffer::~DeviceBuffer() {
  if (pointer_ != 0) cu::load_driver().api->cuMemFree_v2(pointer_);
}

VmmBuffer::VmmBuffer(std::size_t granules, bool exportable) {
  std::string why;
  const cu::DriverApi* api = cuda_for_test(&why);
  if (api == nullptr) throw Error(ErrorCode::NotSupported, "no GPU: " + why, {.op = "VmmBuffer"});
  cu::CUmemAllocationProp prop{};
  prop.type = cu::kAllocationPinned;
  prop.requestedHandleTypes = exportable ? cu::kHandlePosixFd : 0;
  prop.location = {cu::kLocationDevice, 0};
  const ErrorContext where{.op = "VmmBuffer"};
  cu::check(*api, api->cuMemGetAllocationGranularity(&granularity_, &prop, cu::kGranularityMinimum),
            "cuMemGetAllocationGranularity", where);
  size_ = granules * granularity_;
  cu::check(*api, api->cuMemCreate(&handle_, size_, &prop, 0), "cuMemCreate", where);
  cu::check(*api, api->cuMemAddressReserve(&address_, size_, 0, 0, 0), "cuMemAddressReserve", where);
  cu::check(*api, api->cuMemMap(address_, size_, 0, handle_, 0), "cuMemMap", where);
  const cu::CUmemAccessDesc access{{cu::kLocationDevice, 0}, cu::kAccessReadWrite};
  cu::check(*api, api->cuMemSetAccess(address_, size_, &access, 1), "cuMemSetAccess", where);
}

VmmBuffer::~VmmBuffer() {
  const cu::DriverApi& api = *cu::load_driver().api;
  if (address_ != 0) {
    api.cuMemUnmap(address_, size_);
    api.cuMemAddressFree(address_, size_);
  }
  if (handle_ != 0) api.cuMemRelease(handle_);
}

namespace {

// cuMemcpy returns before a copy from pageable memory or between device
// buffers lands, and cuMemsetD8 before device memory is set (CUDA's "API
// synchronization behavior"): the legacy stream they run on is waited for,
// since rdmx's own streams are not ordered with it.
void settle(const cu::DriverApi& api, const char* op, std::size_t bytes) {
  cu::check(api, api.cuStreamSynchronize(nullptr), "cuStreamSynchronize",
            {.op = op, .sizes = std::to_string(bytes) + " B"});
}

}  // namespace

void cuda_copy(void* dst, const void* src, std::size_t bytes) {
  const cu::DriverApi& api = cu::require_driver("cuda_copy");
  cu::check(api,
            api.cuMemcpy(static_cast<cu::CUdeviceptr>(reinterpret_cast<std::uintptr_t>(dst)),
                         static_cast<cu::CUdeviceptr>(reinterpret_cast<std::uintptr_t>(src)), bytes),
            "cuMemcpy", {.op = "cuda_copy", .sizes = std::to_string(bytes) + " B"});
  settle(api, "cuda_copy", bytes);
}

void cuda_set(void* dst, std::uint8_t value, std::size_t bytes) {
  const cu::DriverApi& api = cu::require_driver("cuda_set");
  cu::check(api, api.cuMemsetD8_v2(static_cast<cu::CUdeviceptr>(reinterpret_cast<std::uintptr_t>(dst)), value, bytes),
            "cuMemsetD8", {.op = "cuda_set", .sizes = std::to_string(bytes) + " B"});
  settle(api, "cuda_set", bytes);
}

namespace {

// Runs `question` in a forked child (which may initialise CUDA) and returns
// its verdict: true or false, and the reason in `why`.
bool ask_in_child(const std::function<bool(std::string*)>& question, std::string* why) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) {
    *why = "pipe() failed";
    return false;
  }
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(pipe_fds[0]);
    std::string reason;
    bool yes = false;
    try {
      yes = question(&reason);
    } catch (const std::exception& e) {
      reason = e.what();
    }
    const std::string message = (yes ? "1" : "0") + reason;
    [[maybe_unused]] const ssize_t written = ::write(pipe_fds[1], message.data(), message.size());
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  std::string message;
  char chunk[256];
  for (ssize_t n; (n = ::read(pipe_fds[0], chunk, sizeof chunk)) > 0;)
    message.append(chunk, static_cast<std::size_t>(n));
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (message.empty()) {
    *why = "the probe process died (status " + std::to_string(status) + ")";
    return false;
  }
  *why = message.substr(1);
  return message[0] == '1';
}

}  // namespace

long long simulated_driver_count(const char* name) {
  using Count = unsigned long long (*)();
  void* library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  const std::string symbol = std::string("rdmx_sim_") + name;
  auto* count = library != nullptr ? reinterpret_cast<Count>(::dlsym(library, symbol.c_str())) : nullptr;
  return count != nullptr ? static_cast<long long>(count()) : -1;
}

bool gpu_usable_in_child(std::string* why) {
  return ask_in_child([](std::string* reason) { return cuda_for_test(reason) != nullptr; }, why);
}

bool device_memory_served_in_child(const std::string& provider, std::string* why, bool by_peer_mapping) {
  return ask_in_child(
      [&provider, by_peer_mapping](std::string* reason) {
        if (cuda_for_test(reason) == nullptr) {
          *reason = "needs a GPU (runs on the device machine): " + *reason;
          return false;
        }
        const std::shared_ptr<Device> device = open_device(provider);
        const CudaMemorySupport support = device->caps().cuda_memory;
        if (support == CudaMemorySupport::None) {
          *reason = "provider " + provider + " serves no device memory here (" + device->selection_reason() + ")";
          return false;
        }
        if (by_peer_mapping && support != CudaMemorySupport::PeerMapping) {
          *reason = "provider " + provider + " reports cuda_memory " + to_string(support) +
                    ", not peer-mapping: the exportable half runs where peers map memory, the cudaMalloc-style "
                    "half covers staging";
          return false;
        }
        return true;
      },
      why);
}

}  // namespace rdmx::test
