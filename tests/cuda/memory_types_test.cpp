// SPDX-License-Identifier: MIT
// Memory types in the core API: every region says where its memory lives;
// CUDA device memory is recognised through the driver (cudaMalloc-style,
// cuMemCreate + cuMemMap, and pointers inside either), ranges that leave
// their allocation are refused, and a provider that cannot serve device
// memory says so at registration instead of touching it. The GPU cases
// skip without a GPU, saying why; the others run everywhere.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "rdmx/info.hpp"
#include "rdmx/verbs.hpp"
#include "services/cuda/driver.hpp"
#include "services/cuda/pointer.hpp"
#include "support/cuda_device.hpp"
#include "support/providers.hpp"
#include "topo/topo.hpp"

namespace rdmx {
namespace {

namespace cu = core::cuda;
using test::DeviceBuffer;

constexpr Access kTypesAccess = Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead;

TEST(MemoryTypes, HostMemoryIsHostOnEveryProvider) {
  std::vector<char> buffer(1 << 16);
  for (const std::string& name : test::tested_providers()) {
    auto device = open_device(name);
    auto pd = device->alloc_pd();
    auto mr = pd->register_memory(buffer.data(), buffer.size(), kTypesAccess);
    EXPECT_EQ(mr->memory_type(), MemoryType::Host) << name;
    EXPECT_EQ(mr->cuda_device(), -1) << name;
    auto allocated = pd->allocate_memory(4096, kTypesAccess);
    EXPECT_EQ(allocated->memory_type(), MemoryType::Host) << name;
    EXPECT_STRNE(to_string(device->caps().cuda_memory), "unknown") << name;
  }
}

// A process that never touched CUDA does not load it by registering memory
// (each test case runs in a process of its own under CTest).
TEST(MemoryTypes, RegisteringHostMemoryDoesNotLoadTheDriver) {
  if (::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) != nullptr) GTEST_SKIP() << "the driver was already loaded";
  std::vector<char> buffer(4096);
  auto device = open_device("tcp");
  auto pd = device->alloc_pd();
  auto mr = pd->register_memory(buffer.data(), buffer.size(), kTypesAccess);
  EXPECT_EQ(::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD), nullptr);
  EXPECT_EQ(cu::classify(buffer.data(), buffer.size(), "test").type, MemoryType::Host);
}

TEST(MemoryTypes, NamesOfTypesAndSupport) {
  EXPECT_STREQ(to_string(MemoryType::Host), "host");
  EXPECT_STREQ(to_string(MemoryType::Cuda), "cuda");
  EXPECT_STREQ(to_string(CudaMemorySupport::None), "none");
  EXPECT_STREQ(to_string(CudaMemorySupport::Staging), "staging");
  EXPECT_STREQ(to_string(CudaMemorySupport::PeerMapping), "peer-mapping");
  EXPECT_STREQ(to_string(CudaMemorySupport::DmaBuf), "dma-buf");
}

// Without a driver the status says exactly why, in the words of the load.
TEST(MemoryTypes, StatusSaysWhyCudaIsOnOrOff) {
  const CudaStatus status = probe_cuda();
  const cu::DriverLoad& load = cu::load_driver();
  EXPECT_EQ(status.usable, load.api != nullptr);
  EXPECT_EQ(status.reason, load.reason);
  if (!status.usable) {
    EXPECT_EQ(status.driver_version == 0, load.version == 0);
    const bool known = status.reason.find("libcuda.so.1") != std::string::npos ||
                       status.reason.find("cuInit failed") != std::string::npos ||
                       status.reason.find("no GPU") != std::string::npos;
    EXPECT_TRUE(known) << status.reason;
    EXPECT_THROW(cu::require_driver("test"), Error);
  } else {
    EXPECT_GE(status.driver_version, 11000) << status.reason;
  }
}

TEST(MemoryTypes, DeviceMemoryIsRecognisedWithItsAllocation) {
  RDMX_REQUIRE_GPU();
  DeviceBuffer buffer(1 << 20);
  const auto base = reinterpret_cast<std::uintptr_t>(buffer.get());
  auto* inside = static_cast<char*>(buffer.get()) + 4096 + 3;
  const cu::PointerInfo info = cu::classify(inside, 4096, "test");
  EXPECT_EQ(info.type, MemoryType::Cuda);
  EXPECT_EQ(info.device, 0);
  EXPECT_EQ(info.allocation_base, base);
  EXPECT_GE(info.allocation_length, 1u << 20);
  EXPECT_TRUE(info.legacy_ipc);
  EXPECT_NE(info.buffer_id, 0u);
  // The last byte of the allocation may end a range; one more may not.
  EXPECT_EQ(cu::classify(static_cast<char*>(buffer.get()) + info.allocation_length - 1, 1, "test").type,
            MemoryType::Cuda);
  try {
    cu::classify(inside, info.allocation_length, "test");
    FAIL() << "a range past the allocation was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("past the end of the CUDA allocation"), std::string::npos) << e.what();
  }
}

// cuMemCreate memory mapped into a reserved range (as NCCL and PyTorch's
// expandable segments allocate) is device memory that exports a file descriptor.
TEST(MemoryTypes, VirtualMemoryManagementAllocationsAreDeviceMemory) {
  RDMX_REQUIRE_GPU();
  test::VmmBuffer buffer(2);
  const cu::PointerInfo info = cu::classify(buffer.get() + buffer.granularity(), 64, "test");
  EXPECT_EQ(info.type, MemoryType::Cuda);
  EXPECT_FALSE(info.legacy_ipc);
  EXPECT_NE(info.handle_types & cu::kHandlePosixFd, 0u);
}

// What makes the simulated driver's runs worth having: the CPU cannot touch
// its device memory, so an engine path that forgets to go through the
// driver crashes the test there, as it would on a GPU.
TEST(MemoryTypes, TheSimulatedGpusMemoryIsOutOfTheCpusReach) {
  RDMX_REQUIRE_GPU();
  const topo::GpuScan& scan = topo::scan_gpus();
  if (scan.gpus.empty() || scan.gpus[0].name.find("simulated") == std::string::npos)
    GTEST_SKIP() << "a real GPU: the simulated driver's promise is not at stake";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  DeviceBuffer buffer(4096);
  EXPECT_DEATH(
      {
        volatile char byte = *static_cast<volatile char*>(buffer.get());
        (void)byte;
      },
      "");
}

TEST(MemoryTypes, PinnedHostMemoryIsHost) {
  RDMX_REQUIRE_GPU();
  std::string why;
  const cu::DriverApi& api = *test::cuda_for_test(&why);
  void* pinned = nullptr;
  cu::check(api, api.cuMemAllocHost_v2(&pinned, 1 << 16), "cuMemAllocHost", {});
  EXPECT_EQ(cu::classify(pinned, 1 << 16, "test").type, MemoryType::Host);
  auto device = open_device("tcp");
  auto pd = device->alloc_pd();
  EXPECT_EQ(pd->register_memory(pinned, 1 << 16, kTypesAccess)->memory_type(), MemoryType::Host);
  api.cuMemFreeHost(pinned);
}

// Every provider either registers device memory, reporting it as such, or
// refuses it by name because its caps say it cannot serve it.
TEST(MemoryTypes, EachProviderRegistersDeviceMemoryOrRefusesItByName) {
  RDMX_REQUIRE_GPU();
  DeviceBuffer buffer(1 << 20);
  for (const std::string& name : test::tested_providers()) {
    auto device = open_device(name);
    auto pd = device->alloc_pd();
    if (device->caps().cuda_memory == CudaMemorySupport::None) {
      try {
        pd->register_memory(buffer.get(), buffer.size(), kTypesAccess);
        ADD_FAILURE() << name << " registered device memory it cannot serve";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::NotSupported) << e.what();
        EXPECT_NE(std::string(e.what()).find("cannot serve CUDA device memory"), std::string::npos) << e.what();
      }
    } else {
      auto mr = pd->register_memory(static_cast<char*>(buffer.get()) + 512, 4096, kTypesAccess);
      EXPECT_EQ(mr->memory_type(), MemoryType::Cuda) << name;
      EXPECT_EQ(mr->cuda_device(), 0) << name;
    }
  }
}

}  // namespace
}  // namespace rdmx
