// SPDX-License-Identifier: MIT
// Operations ordered on a caller's CUDA stream (Communicator::
// set_cuda_stream). The stream is held shut by a wait on a word the test
// owns, so what the operation may and may not see is fixed, not timed: an
// operation that ran ahead of the stream would reduce the inputs' old
// contents, and a stream that ran ahead of the operation would show its
// later copy completing while the operation is still waiting.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "rdmx/comm.hpp"
#include "support/cuda_device.hpp"
#include "support/harness.hpp"

namespace rdmx {
namespace {

using core::cuda::CUdeviceptr;
using core::cuda::CUstream;

constexpr std::size_t kCount = 1024;
constexpr std::size_t kStreamBytes = kCount * sizeof(float);

// A stream of the test's own and a pinned word that holds it shut until opened.
struct GatedStream {
  const core::cuda::DriverApi& api;
  CUstream stream = nullptr;
  std::uint32_t* gate = nullptr;
  CUdeviceptr gate_on_gpu = 0;

  explicit GatedStream(const core::cuda::DriverApi& driver) : api(driver) {
    CHECK_EQ(api.cuStreamCreate(&stream, core::cuda::kStreamNonBlocking), 0);
    void* page = nullptr;
    CHECK_EQ(api.cuMemAllocHost_v2(&page, 4096), 0);
    gate = static_cast<std::uint32_t*>(page);
    *gate = 0;
    CHECK_EQ(api.cuMemHostGetDevicePointer_v2(&gate_on_gpu, page, 0), 0);
  }
  ~GatedStream() {
    open();
    api.cuStreamSynchronize(stream);
    api.cuStreamDestroy_v2(stream);
    api.cuMemFreeHost(gate);
  }
  void shut() { CHECK_EQ(api.cuStreamWaitValue32_v2(stream, gate_on_gpu, 1, core::cuda::kStreamWaitValueGeq), 0); }
  void open() { std::atomic_ref<std::uint32_t>(*gate).store(1, std::memory_order_release); }
  void copy(void* dst, const void* src, std::size_t bytes) {
    CHECK_EQ(api.cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src), bytes, stream),
             0);
  }
};

// Page-locked host memory. A copy between pageable memory and a stream held
// shut would block the host until the stream opens (the driver synchronizes
// the stream to stage pageable memory, and a copy into pageable memory
// returns only once done), and the test, which opens it, would wait for good.
struct PinnedFloats {
  const core::cuda::DriverApi& api;
  float* data = nullptr;
  PinnedFloats(const core::cuda::DriverApi& driver, float value) : api(driver) {
    void* page = nullptr;
    CHECK_EQ(api.cuMemAllocHost_v2(&page, kStreamBytes), 0);
    data = static_cast<float*>(page);
    std::fill(data, data + kCount, value);
  }
  ~PinnedFloats() { api.cuMemFreeHost(data); }
  PinnedFloats(const PinnedFloats&) = delete;
  PinnedFloats& operator=(const PinnedFloats&) = delete;
};

std::unique_ptr<Communicator> device_comm(test::RankEnv& env, const core::cuda::DriverApi** api) {
  std::string why;
  *api = test::cuda_for_test(&why);
  CHECK(*api != nullptr) << why;
  CommOptions options;
  options.provider = "shm";
  options.tag = "stream";
  return Communicator::create(env.store_ptr(), env.rank(), env.world_size(), options);
}

TEST(CudaStreamOrdering, AnOperationWaitsForItsStreamAndTheStreamWaitsForIt) {
  RDMX_REQUIRE_GPU_BEFORE_FORK();
  ASSERT_TRUE(test::run_ranks(2, test::Placement::Local, [](test::RankEnv& env) {
    const core::cuda::DriverApi* api = nullptr;
    auto comm = device_comm(env, &api);
    test::DeviceBuffer in(kStreamBytes), out(kStreamBytes);
    const std::vector<float> zeros(kCount, 0.0f), minus(kCount, -1.0f);
    test::cuda_copy(in.get(), zeros.data(), kStreamBytes);
    test::cuda_copy(out.get(), minus.data(), kStreamBytes);
    const PinnedFloats input(*api, static_cast<float>(env.rank() + 1));
    PinnedFloats result(*api, -2.0f);
    {
      GatedStream s(*api);
      s.shut();
      s.copy(in.get(), input.data, kStreamBytes);  // the inputs arrive only once the gate opens
      comm->set_cuda_stream(s.stream);
      Work work = comm->iall_reduce(in.get(), out.get(), kCount, DataType::Float32, ReduceOp::Sum);
      s.copy(result.data, out.get(), kStreamBytes);
      core::cuda::CUevent copied = nullptr;
      CHECK_EQ(api->cuEventCreate(&copied, 0), 0);
      CHECK_EQ(api->cuEventRecord(copied, s.stream), 0);
      CHECK(!work.test()) << "the operation finished before its stream let it read its inputs";
      s.open();
      work.wait();
      CHECK_EQ(api->cuStreamSynchronize(s.stream), 0);
      CHECK_EQ(api->cuEventQuery(copied), 0);
      api->cuEventDestroy_v2(copied);
    }
    for (std::size_t i = 0; i < kCount; ++i) {
      CHECK_EQ(result.data[i], 3.0f) << "element " << i << ": the stream and the operation ran out of order";
      if (result.data[i] != 3.0f) break;
    }
    // The blocking form on the same stream, and a stream unset again.
    GatedStream s(*api);
    const PinnedFloats twice(*api, static_cast<float>(2 * (env.rank() + 1)));
    s.copy(in.get(), twice.data, kStreamBytes);
    comm->set_cuda_stream(s.stream);
    comm->all_reduce(in.get(), out.get(), kCount, DataType::Float32, ReduceOp::Sum);
    comm->set_cuda_stream(nullptr);
    test::cuda_copy(result.data, out.get(), kStreamBytes);
    CHECK_EQ(result.data[0], 6.0f);
    CHECK_EQ(result.data[kCount - 1], 6.0f);
  }));
}

// A failed operation still lets its stream go on: the error goes to the
// caller, and work queued after it runs.
TEST(CudaStreamOrdering, AFailedOperationReleasesItsStream) {
  RDMX_REQUIRE_GPU_BEFORE_FORK();
  ASSERT_TRUE(test::run_ranks(2, test::Placement::Local, [](test::RankEnv& env) {
    const core::cuda::DriverApi* api = nullptr;
    auto comm = device_comm(env, &api);
    test::DeviceBuffer buffer(kStreamBytes);
    GatedStream s(*api);
    comm->set_cuda_stream(s.stream);
    // Ranks disagree on the count: both calls fail, naming the mismatch.
    const std::size_t count = env.rank() == 0 ? kCount : kCount / 2;
    try {
      comm->broadcast(buffer.get(), count, DataType::Float32, 0);
      CHECK(false) << "a mismatched broadcast succeeded";
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::Protocol || e.code() == ErrorCode::PeerFailure) << e.what();
    }
    std::vector<float> back(kCount);
    s.copy(back.data(), buffer.get(), kStreamBytes);
    CHECK_EQ(api->cuStreamSynchronize(s.stream), 0) << "the stream was left waiting for the failed operation";
  }));
}

}  // namespace
}  // namespace rdmx
