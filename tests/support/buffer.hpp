// SPDX-License-Identifier: MIT
// Memory that tests register, in host memory or in GPU memory, and the byte
// helpers that reach either kind. The conformance suite runs every case once
// per kind (its memory dimension): a case writes its bytes with fill_pattern,
// set_bytes, copy_bytes or store_u64 and checks them with CHECK_PATTERN,
// CHECK_BYTES or load_u64, never with plain CPU loads and stores, so the same
// body runs on device memory (where a CPU access crashes under the simulated
// driver, as it faults on a GPU).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace rdmx::test {

// Where a Buffer lives:
//   Host              page-aligned anonymous mappings (pages are only touched when used);
//   Device            GPU 0's memory from cuMemAlloc, one page into a larger
//                     allocation (as PyTorch's caching allocator hands out);
//   ExportableDevice  cuMemCreate memory exportable as a file descriptor (the
//                     kind shm's peers map), also one page into its range.
enum class BufferMemory { Host, Device, ExportableDevice };
const char* to_string(BufferMemory memory) noexcept;

// The kind a Buffer made without one gets in this process: Host unless a
// test's ranks set another (the conformance suite does, per case).
void set_buffer_memory(BufferMemory memory);
BufferMemory buffer_memory();

class Buffer {
 public:
  explicit Buffer(std::size_t size) : Buffer(size, buffer_memory()) {}
  Buffer(std::size_t size, BufferMemory memory);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  // The address to register; a device address for device memory.
  std::uint8_t* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  BufferMemory memory() const noexcept { return memory_; }
  std::uint64_t addr(std::size_t offset = 0) const noexcept { return reinterpret_cast<std::uint64_t>(data_ + offset); }
  // The 8 bytes at `offset`, read or written as one word (see load_u64).
  std::uint64_t load64(std::size_t offset) const;
  void store64(std::size_t offset, std::uint64_t value) const;
  // CPU access: host memory only.
  std::uint8_t& operator[](std::size_t i) const noexcept { return data_[i]; }
  std::uint64_t* u64(std::size_t offset = 0) const noexcept { return reinterpret_cast<std::uint64_t*>(data_ + offset); }

 private:
  struct Device;
  std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  BufferMemory memory_;
  Device* device_ = nullptr;
};

// Byte helpers for any memory a Buffer holds (and any host memory): device
// memory is reached through the driver, host memory directly.
void set_bytes(void* dst, std::uint8_t value, std::size_t len);
void copy_bytes(void* dst, const void* src, std::size_t len);
// An 8-byte word read or written whole: atomically in host memory (peers and
// the provider's threads may change it concurrently), by one 8-byte copy in
// device memory.
std::uint64_t load_u64(const void* p);
void store_u64(void* p, std::uint64_t value);

// A deterministic byte stream: byte `pos` of stream `seed` is byte pos%8 of a
// 64-bit word derived from (seed, pos/8). Filling and checking run at memory
// speed, so whole GiB regions can be verified.
void fill_pattern(void* dst, std::size_t len, std::uint64_t seed, std::uint64_t pos = 0);
std::uint8_t pattern_byte(std::uint64_t seed, std::uint64_t pos);
// Offset of the first byte of [p, p+len) that differs from the stream, or nullopt.
std::optional<std::size_t> find_pattern_mismatch(const void* p, std::size_t len, std::uint64_t seed,
                                                 std::uint64_t pos = 0);
// Fails the rank, naming `what`, the offset and the bytes, on a mismatch.
void check_pattern(const void* p, std::size_t len, std::uint64_t seed, std::uint64_t pos, const std::string& what,
                   const char* file, int line);
#define CHECK_PATTERN(ptr, len, seed, pos, what) \
  ::rdmx::test::check_pattern((ptr), (len), (seed), (pos), (what), __FILE__, __LINE__)
// Fails the rank when [p, p+len) is not all `value`.
void check_bytes(const void* p, std::size_t len, std::uint8_t value, const std::string& what, const char* file,
                 int line);
#define CHECK_BYTES(ptr, len, value, what) ::rdmx::test::check_bytes((ptr), (len), (value), (what), __FILE__, __LINE__)

}  // namespace rdmx::test
