// SPDX-License-Identifier: MIT
#include "support/buffer.hpp"

#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <vector>

#include "services/race_annotations.hpp"
#include "support/cuda_device.hpp"
#include "support/harness.hpp"
#include "support/text.hpp"

namespace rdmx::test {
namespace {

// Device Buffers start this far into their allocation.
constexpr std::size_t kIntoAllocation = 4096;
constexpr std::size_t kHugeBuffer = std::size_t{256} << 20;  // from here on, host Buffers ask for huge pages

inline std::uint64_t pattern_word(std::uint64_t seed, std::uint64_t index) {
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + index + 1;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  return x;
}

BufferMemory process_memory = BufferMemory::Host;

// The live device Buffers of this process (start -> end), so that the byte
// helpers know which pointers only the driver may touch.
std::mutex device_ranges_mutex;
std::map<std::uintptr_t, std::uintptr_t> device_ranges;

bool on_device(const void* p, std::size_t len) {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard lock(device_ranges_mutex);
  if (device_ranges.empty()) return false;
  auto it = device_ranges.upper_bound(at);
  if (it == device_ranges.begin()) return false;
  --it;
  if (at >= it->second) return false;
  CHECK(at + len <= it->second) << "a byte helper was given " << len << " bytes at " << p
                                << ", past the end of the device buffer it starts in";
  return true;
}

// [p, p+len) readable by the CPU: p itself for host memory, else a copy of
// the device bytes kept in `copy`.
const std::uint8_t* readable(const void* p, std::size_t len, std::vector<std::uint8_t>& copy) {
  if (!on_device(p, len)) return static_cast<const std::uint8_t*>(p);
  copy.resize(len);
  if (len > 0) cuda_copy(copy.data(), p, len);
  return copy.data();
}

void fill_host(std::uint8_t* out, std::size_t len, std::uint64_t seed, std::uint64_t pos) {
  std::size_t k = 0;
  while (k < len && (pos + k) % 8 != 0) {
    out[k] = pattern_byte(seed, pos + k);
    ++k;
  }
  std::uint64_t word = (pos + k) / 8;
  for (; k + 8 <= len; k += 8, ++word) {
    std::uint64_t w = pattern_word(seed, word);
    std::memcpy(out + k, &w, 8);
  }
  for (; k < len; ++k) out[k] = pattern_byte(seed, pos + k);
}

std::optional<std::size_t> find_in_host(const std::uint8_t* in, std::size_t len, std::uint64_t seed,
                                        std::uint64_t pos) {
  std::size_t k = 0;
  while (k < len && (pos + k) % 8 != 0) {
    if (in[k] != pattern_byte(seed, pos + k)) return k;
    ++k;
  }
  std::uint64_t word = (pos + k) / 8;
  for (; k + 8 <= len; k += 8, ++word) {
    std::uint64_t w;
    std::memcpy(&w, in + k, 8);
    if (w != pattern_word(seed, word)) {
      for (std::size_t j = 0; j < 8; ++j) {
        if (in[k + j] != pattern_byte(seed, pos + k + j)) return k + j;
      }
    }
  }
  for (; k < len; ++k) {
    if (in[k] != pattern_byte(seed, pos + k)) return k;
  }
  return std::nullopt;
}

}  // namespace

const char* to_string(BufferMemory memory) noexcept {
  switch (memory) {
    case BufferMemory::Host: return "host";
    case BufferMemory::Device: return "device";
    case BufferMemory::ExportableDevice: return "exportable device";
  }
  return "?";
}

void set_buffer_memory(BufferMemory memory) { process_memory = memory; }
BufferMemory buffer_memory() { return process_memory; }

// The allocation behind a device Buffer.
struct Buffer::Device {
  std::unique_ptr<DeviceBuffer> plain;
  std::unique_ptr<VmmBuffer> exportable;
};

Buffer::Buffer(std::size_t size, BufferMemory memory) : size_(size), memory_(memory) {
  if (memory == BufferMemory::Host) {
    std::size_t map = size == 0 ? 4096 : size;
    void* p = ::mmap(nullptr, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      FAIL_RANK() << "mmap of " << size << " bytes failed: " << std::strerror(errno);
    }
    // Huge pages for the gigabyte buffers: first touches (the fill, or the
    // provider's copy into fresh memory) fault a page at a time, and in a
    // virtual machine that fault, not the copy, is what a 2 GiB transfer
    // spends its time on.
    if (map >= kHugeBuffer) ::madvise(p, map, MADV_HUGEPAGE);
    data_ = static_cast<std::uint8_t*>(p);
    return;
  }
  std::string why;
  CHECK(cuda_for_test(&why) != nullptr) << "a " << to_string(memory) << " Buffer needs a GPU: " << why;
  auto device = std::make_unique<Device>();
  // A page before and after: the registered range is inside a larger allocation.
  const std::size_t bytes = size + 2 * kIntoAllocation;
  std::uint8_t* base = nullptr;
  if (memory == BufferMemory::Device) {
    device->plain = std::make_unique<DeviceBuffer>(bytes);
    base = static_cast<std::uint8_t*>(device->plain->get());
  } else {
    device->exportable = std::make_unique<VmmBuffer>(1);
    const std::size_t granule = device->exportable->granularity();
    if (bytes > granule) device->exportable = std::make_unique<VmmBuffer>((bytes + granule - 1) / granule);
    base = reinterpret_cast<std::uint8_t*>(device->exportable->get());
  }
  data_ = base + kIntoAllocation;
  // Zeroed, as fresh host pages are.
  if (size > 0) cuda_set(data_, 0, size);
  std::lock_guard lock(device_ranges_mutex);
  device_ranges[reinterpret_cast<std::uintptr_t>(data_)] = reinterpret_cast<std::uintptr_t>(data_ + size_);
  device_ = device.release();
}

Buffer::~Buffer() {
  if (device_ == nullptr) {
    if (data_ != nullptr) ::munmap(data_, size_ == 0 ? 4096 : size_);
    return;
  }
  {
    std::lock_guard lock(device_ranges_mutex);
    device_ranges.erase(reinterpret_cast<std::uintptr_t>(data_));
  }
  delete device_;
}

std::uint64_t Buffer::load64(std::size_t offset) const {
  CHECK(offset + 8 <= size_) << "word at offset " << offset << " of a " << size_ << "-byte buffer";
  return load_u64(data_ + offset);
}

void Buffer::store64(std::size_t offset, std::uint64_t value) const {
  CHECK(offset + 8 <= size_) << "word at offset " << offset << " of a " << size_ << "-byte buffer";
  store_u64(data_ + offset, value);
}

void set_bytes(void* dst, std::uint8_t value, std::size_t len) {
  if (len == 0) return;  // dst may be null (an empty vector's data()): memset's is UB
  if (!on_device(dst, len)) {
    std::memset(dst, value, len);
    return;
  }
  cuda_set(dst, value, len);
}

void copy_bytes(void* dst, const void* src, std::size_t len) {
  // Either side may be memory a peer writes, ordered by the test out of band;
  // an empty copy still marks where the test's earlier reads end.
  core::acquire_remote_placements();
  if (len == 0) {
    // either may be null (an empty vector's data()): memcpy's is UB
  } else if (on_device(dst, len) || on_device(src, len)) {
    cuda_copy(dst, src, len);
  } else {
    std::memcpy(dst, src, len);
  }
  core::release_remote_placements();
}

std::uint64_t load_u64(const void* p) {
  if (on_device(p, 8)) {
    std::uint64_t value = 0;
    cuda_copy(&value, p, 8);
    return value;
  }
  // A test polls a word a peer WRITEs, then lets the peer overwrite it out of band.
  core::acquire_remote_placements();
  const std::uint64_t value = std::atomic_ref<std::uint64_t>(*static_cast<std::uint64_t*>(const_cast<void*>(p))).load();
  core::release_remote_placements();
  return value;
}

void store_u64(void* p, std::uint64_t value) {
  if (on_device(p, 8)) {
    cuda_copy(p, &value, 8);
    return;
  }
  core::acquire_remote_placements();
  std::atomic_ref<std::uint64_t>(*static_cast<std::uint64_t*>(p)).store(value);
  core::release_remote_placements();
}

std::uint8_t pattern_byte(std::uint64_t seed, std::uint64_t pos) {
  return static_cast<std::uint8_t>(pattern_word(seed, pos / 8) >> (8 * (pos % 8)));
}

void fill_pattern(void* dst, std::size_t len, std::uint64_t seed, std::uint64_t pos) {
  if (!on_device(dst, len)) {
    fill_host(static_cast<std::uint8_t*>(dst), len, seed, pos);
    return;
  }
  std::vector<std::uint8_t> bytes(len);
  fill_host(bytes.data(), len, seed, pos);
  if (len > 0) cuda_copy(dst, bytes.data(), len);
}

std::optional<std::size_t> find_pattern_mismatch(const void* p, std::size_t len, std::uint64_t seed,
                                                 std::uint64_t pos) {
  // The test learned through the store that a peer's transfer landed, and
  // lets the next one in the same way: tell TSan both.
  core::acquire_remote_placements();
  std::vector<std::uint8_t> copy;
  auto bad = find_in_host(readable(p, len, copy), len, seed, pos);
  core::release_remote_placements();
  return bad;
}

void check_pattern(const void* p, std::size_t len, std::uint64_t seed, std::uint64_t pos, const std::string& what,
                   const char* file, int line) {
  core::acquire_remote_placements();
  std::vector<std::uint8_t> copy;
  const std::uint8_t* in = readable(p, len, copy);
  auto bad = find_in_host(in, len, seed, pos);
  core::release_remote_placements();
  if (!bad) return;
  std::size_t run = 1;
  while (*bad + run < len && in[*bad + run] != pattern_byte(seed, pos + *bad + run)) ++run;
  std::ostringstream msg;
  msg << what << ": content differs from pattern(seed " << seed << ") at offset " << *bad << " of " << len << ": got "
      << hex(in[*bad]) << ", expected " << hex(pattern_byte(seed, pos + *bad)) << " (" << run
      << " consecutive bad bytes from there";
  if (in[*bad] == 0) msg << "; zero bytes suggest the data never arrived";
  msg << ")";
  if (!copy.empty()) msg << " [device memory]";
  fail_rank(file, line, msg.str());
}

void check_bytes(const void* p, std::size_t len, std::uint8_t value, const std::string& what, const char* file,
                 int line) {
  core::acquire_remote_placements();
  std::vector<std::uint8_t> copy;
  const std::uint8_t* in = readable(p, len, copy);
  core::release_remote_placements();
  for (std::size_t k = 0; k < len; ++k) {
    if (in[k] != value) {
      fail_rank(file, line,
                what + ": byte at offset " + std::to_string(k) + " of " + std::to_string(len) + " is " + hex(in[k]) +
                    ", expected " + hex(value) + (copy.empty() ? "" : " [device memory]"));
    }
  }
}

}  // namespace rdmx::test
