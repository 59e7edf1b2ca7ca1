// SPDX-License-Identifier: MIT
// CUDA for rdmx perf's device buffers, used as an application uses it: the
// driver API loaded at run time with dlopen (the tools link rdmx alone, and
// rdmx's own loader is not part of its public API), one GPU's primary
// context current on the calling thread, allocations, and copies that have
// landed when they return (each is followed by a synchronize, since the
// driver may return from cuMemcpy and cuMemsetD8 before the data lands).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace rdmx::cli::gpu {

class Gpu {
 public:
  // Loads the driver and makes GPU `requested` current on this thread, or,
  // with -1, GPU local_rank % count (as NCCL's tests pick one per local
  // rank). Throws Error(NotSupported) saying why without a usable GPU, and
  // InvalidArgument for an ordinal the driver does not have. Later calls
  // return the first one's GPU.
  static Gpu& open(int requested, int local_rank, const char* op);

  int ordinal() const noexcept { return ordinal_; }
  int count() const noexcept { return count_; }
  const std::string& name() const noexcept { return name_; }

  void* allocate(std::size_t bytes);  // cuMemAlloc
  void free(void* pointer) noexcept;  // cuMemFree
  // Copies between any two pointers (unified addressing), landed on return.
  void copy(void* dst, const void* src, std::size_t bytes);
  // Sets device memory, landed on return.
  void set(void* dst, std::uint8_t value, std::size_t bytes);

  // A stream of its own (non-blocking), copies queued on it, and a wait for them.
  void* create_stream();
  void destroy_stream(void* stream) noexcept;
  void copy_async(void* dst, const void* src, std::size_t bytes, void* stream);
  void synchronize(void* stream);

 private:
  Gpu() = default;
  void check(int result, const char* call, std::size_t bytes = 0) const;

  int ordinal_ = -1;
  int count_ = 0;
  std::string name_;
  std::string op_;
};

// Device memory of `gpu`, freed on destruction: deregister any region over
// it before this goes.
class DeviceBuffer {
 public:
  DeviceBuffer(Gpu& gpu, std::size_t bytes) : gpu_(gpu), pointer_(gpu.allocate(bytes)), bytes_(bytes) {}
  ~DeviceBuffer() { gpu_.free(pointer_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  unsigned char* get() const noexcept { return static_cast<unsigned char*>(pointer_); }
  std::size_t size() const noexcept { return bytes_; }

 private:
  Gpu& gpu_;
  void* pointer_;
  std::size_t bytes_;
};

}  // namespace rdmx::cli::gpu
