// SPDX-License-Identifier: MIT
// GPU memory for tests, through the driver rdmx loads (core/cuda): the
// first GPU's primary context made current, device allocations that free
// themselves, and copies. Tests that need a GPU start with
//   RDMX_REQUIRE_GPU();
// which skips the test, saying why, on a host without one (CI, the
// development machines).
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "services/cuda/driver.hpp"

namespace rdmx::test {

// The driver with GPU 0's primary context current on this thread, or null
// with `why` set.
const core::cuda::DriverApi* cuda_for_test(std::string* why);

#define RDMX_REQUIRE_GPU()                                                                \
  do {                                                                                    \
    std::string rdmx_no_gpu_reason;                                                       \
    if (::rdmx::test::cuda_for_test(&rdmx_no_gpu_reason) == nullptr)                      \
      GTEST_SKIP() << "needs a GPU (runs on the device machine): " << rdmx_no_gpu_reason; \
  } while (0)

// cuMemAlloc'd device memory, freed on destruction.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(pointer_)); }
  std::size_t size() const { return bytes_; }

 private:
  core::cuda::CUdeviceptr pointer_ = 0;
  std::size_t bytes_;
};

// A cuMemCreate allocation of `granules` allocation granules on GPU 0,
// mapped read-write into a range of its own (as NCCL and PyTorch's
// expandable segments allocate), exportable as a POSIX file descriptor
// unless `exportable` is false; unmapped and released on destruction.
class VmmBuffer {
 public:
  explicit VmmBuffer(std::size_t granules = 1, bool exportable = true);
  ~VmmBuffer();
  VmmBuffer(const VmmBuffer&) = delete;
  VmmBuffer& operator=(const VmmBuffer&) = delete;
  char* get() const { return reinterpret_cast<char*>(static_cast<std::uintptr_t>(address_)); }
  std::size_t size() const { return size_; }
  std::size_t granularity() const { return granularity_; }

 private:
  std::size_t granularity_ = 0;
  std::size_t size_ = 0;
  core::cuda::CUmemGenericAllocationHandle handle_ = 0;
  core::cuda::CUdeviceptr address_ = 0;
};

// cuMemcpy between any two pointers (unified addressing); the bytes are in
// place when it returns.
void cuda_copy(void* dst, const void* src, std::size_t bytes);
// cuMemsetD8 on device memory; set when it returns.
void cuda_set(void* dst, std::uint8_t value, std::size_t bytes);

// A count the simulated driver keeps in this process (tests/cuda_sim:
// "peer_copies", copies that touched another process's memory;
// "pageable_copies", copies of 64 KiB or more between device memory and
// host memory not page-locked); -1 on a real driver, which keeps none.
long long simulated_driver_count(const char* name);

}  // namespace rdmx::test

namespace rdmx::test {

// Whether a GPU is usable, asked in a child process so that the caller never
// initialises CUDA: a test that forks ranks must not, since CUDA does not
// survive fork() (the ranks initialise it themselves).
bool gpu_usable_in_child(std::string* why);

// Whether `provider`'s device serves device memory (caps().cuda_memory is
// not none; with `by_peer_mapping`, is peer-mapping) on a usable GPU, asked
// in a child process likewise; `why` says why not.
bool device_memory_served_in_child(const std::string& provider, std::string* why, bool by_peer_mapping = false);

#define RDMX_REQUIRE_GPU_BEFORE_FORK()                                                    \
  do {                                                                                    \
    std::string rdmx_no_gpu_reason;                                                       \
    if (!::rdmx::test::gpu_usable_in_child(&rdmx_no_gpu_reason))                          \
      GTEST_SKIP() << "needs a GPU (runs on the device machine): " << rdmx_no_gpu_reason; \
  } while (0)

}  // namespace rdmx::test
