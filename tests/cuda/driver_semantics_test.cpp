// SPDX-License-Identifier: MIT
// What CUDA documents of its streams and copies and rdmx relies on, checked
// on the real driver and held to on the simulated one: device-to-device
// copies and device memsets return before they land (CUDA's "API
// synchronization behavior"), and the legacy default stream orders blocking
// streams but not non-blocking ones. The legacy stream is held shut by a
// wait on a word the test owns, so what may have run is fixed, not timed.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "support/cuda_device.hpp"
#include "support/harness.hpp"
#include "support/verbs_util.hpp"

namespace rdmx {
namespace {

namespace cu = core::cuda;
using cu::CUdeviceptr;

constexpr std::size_t kDriverBytes = 4096;
constexpr cu::CUresult kNotReady = 600;

CUdeviceptr address(const void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)); }

// Holds the legacy default stream until released; released however the test ends.
class HeldLegacyStream {
 public:
  explicit HeldLegacyStream(const cu::DriverApi& api) : api_(api) {
    void* page = nullptr;
    CHECK_EQ(api_.cuMemAllocHost_v2(&page, 4096), 0);
    gate_ = static_cast<std::uint32_t*>(page);
    *gate_ = 0;
    CUdeviceptr on_gpu = 0;
    CHECK_EQ(api_.cuMemHostGetDevicePointer_v2(&on_gpu, page, 0), 0);
    CHECK_EQ(api_.cuStreamWaitValue32_v2(nullptr, on_gpu, 1, cu::kStreamWaitValueGeq), 0);
  }
  ~HeldLegacyStream() {
    release();
    api_.cuStreamSynchronize(nullptr);
    api_.cuMemFreeHost(gate_);
  }
  HeldLegacyStream(const HeldLegacyStream&) = delete;
  HeldLegacyStream& operator=(const HeldLegacyStream&) = delete;
  void release() { std::atomic_ref<std::uint32_t>(*gate_).store(1, std::memory_order_release); }

 private:
  const cu::DriverApi& api_;
  std::uint32_t* gate_ = nullptr;
};

// Reads device memory on a non-blocking stream, which the held legacy stream does not hold.
class SideReader {
 public:
  explicit SideReader(const cu::DriverApi& api) : api_(api) {
    CHECK_EQ(api_.cuStreamCreate(&stream_, cu::kStreamNonBlocking), 0);
    void* page = nullptr;
    CHECK_EQ(api_.cuMemAllocHost_v2(&page, kDriverBytes), 0);
    landing_ = static_cast<std::uint8_t*>(page);
  }
  ~SideReader() {
    api_.cuStreamDestroy_v2(stream_);
    api_.cuMemFreeHost(landing_);
  }
  SideReader(const SideReader&) = delete;
  SideReader& operator=(const SideReader&) = delete;
  std::vector<std::uint8_t> read(const void* device) {
    CHECK_EQ(api_.cuMemcpyAsync(address(landing_), address(device), kDriverBytes, stream_), 0);
    CHECK_EQ(api_.cuStreamSynchronize(stream_), 0);
    return {landing_, landing_ + kDriverBytes};
  }

 private:
  const cu::DriverApi& api_;
  cu::CUstream stream_ = nullptr;
  std::uint8_t* landing_ = nullptr;
};

const cu::DriverApi& driver() {
  std::string why;
  const cu::DriverApi* api = test::cuda_for_test(&why);
  CHECK(api != nullptr) << why;
  return *api;
}

// Each case runs in a process of its own: a process that has used CUDA cannot fork one that does.
class CudaDriverSemantics : public ::testing::Test {
 protected:
  void SetUp() override { RDMX_REQUIRE_GPU_BEFORE_FORK(); }
  static void in_child(void (*body)()) {
    ASSERT_TRUE(test::run_ranks(1, test::Placement::Local, [body](test::RankEnv&) { body(); }));
  }
};

TEST_F(CudaDriverSemantics, ACopyBetweenDeviceBuffersReturnsBeforeItLands) {
  in_child([] {
    const cu::DriverApi& api = driver();
    test::DeviceBuffer from(kDriverBytes), to(kDriverBytes);
    const std::vector<std::uint8_t> ones(kDriverBytes, 1), zeros(kDriverBytes, 0);
    test::cuda_copy(from.get(), ones.data(), kDriverBytes);
    test::cuda_copy(to.get(), zeros.data(), kDriverBytes);
    SideReader side(api);
    {
      HeldLegacyStream held(api);
      CHECK_EQ(api.cuMemcpy(address(to.get()), address(from.get()), kDriverBytes), 0);
      CHECK_EQ(side.read(to.get()), zeros) << "cuMemcpy between device buffers waited for its copy";
      held.release();
      CHECK_EQ(api.cuStreamSynchronize(nullptr), 0);
    }
    CHECK_EQ(side.read(to.get()), ones);
  });
}

TEST_F(CudaDriverSemantics, ASetOfDeviceMemoryReturnsBeforeItLands) {
  in_child([] {
    const cu::DriverApi& api = driver();
    test::DeviceBuffer buffer(kDriverBytes);
    const std::vector<std::uint8_t> zeros(kDriverBytes, 0), sevens(kDriverBytes, 7);
    test::cuda_copy(buffer.get(), zeros.data(), kDriverBytes);
    SideReader side(api);
    {
      HeldLegacyStream held(api);
      CHECK_EQ(api.cuMemsetD8_v2(address(buffer.get()), 7, kDriverBytes), 0);
      CHECK_EQ(side.read(buffer.get()), zeros) << "cuMemsetD8 on device memory waited for the set";
      held.release();
      CHECK_EQ(api.cuStreamSynchronize(nullptr), 0);
    }
    CHECK_EQ(side.read(buffer.get()), sevens);
  });
}

TEST_F(CudaDriverSemantics, TheLegacyStreamHoldsBlockingStreamsOnly) {
  in_child([] {
    const cu::DriverApi& api = driver();
    cu::CUstream blocking = nullptr, non_blocking = nullptr;
    CHECK_EQ(api.cuStreamCreate(&blocking, 0), 0);
    CHECK_EQ(api.cuStreamCreate(&non_blocking, cu::kStreamNonBlocking), 0);
    cu::CUevent after_blocking = nullptr, after_non_blocking = nullptr;
    CHECK_EQ(api.cuEventCreate(&after_blocking, 0), 0);
    CHECK_EQ(api.cuEventCreate(&after_non_blocking, 0), 0);
    {
      HeldLegacyStream held(api);
      CHECK_EQ(api.cuEventRecord(after_blocking, blocking), 0);
      CHECK_EQ(api.cuEventRecord(after_non_blocking, non_blocking), 0);
      CHECK_EQ(api.cuStreamSynchronize(non_blocking), 0);
      CHECK_EQ(api.cuEventQuery(after_non_blocking), 0);
      CHECK_EQ(api.cuEventQuery(after_blocking), kNotReady) << "a blocking stream ran ahead of the legacy stream";
      held.release();
      CHECK_EQ(api.cuEventSynchronize(after_blocking), 0);
    }
    api.cuEventDestroy_v2(after_blocking);
    api.cuEventDestroy_v2(after_non_blocking);
    api.cuStreamDestroy_v2(blocking);
    api.cuStreamDestroy_v2(non_blocking);
  });
}

}  // namespace
}  // namespace rdmx
