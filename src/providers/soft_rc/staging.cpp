// SPDX-License-Identifier: MIT
#include "providers/soft_rc/staging.hpp"

#include <algorithm>
#include <cstring>

#include "driver/work_request.hpp"
#include "services/cuda/copy.hpp"
#include "services/settings.hpp"

namespace rdmx::core {
namespace {

constexpr SizeSetting kStagingBytes{"RDMX_CUDA_STAGING_BYTES", std::size_t{64} << 20,
                                    "device memory moved through host buffers (tcp; shm before a region is mapped): "
                                    "host bytes a QP's requests in flight may hold; a larger request is staged alone"};
RDMX_SETTING(kStagingBytes);

// Host memory with memcpy, device memory through the driver.
void copy_piece(void* dst, const void* src, std::size_t n, const RegionMemory& device_side) {
  if (device_side.type == MemoryType::Host) {
    std::memcpy(dst, src, n);
  } else {
    cuda::copy_memory(dst, src, n, device_side.device, "staging device memory");
  }
}

}  // namespace

Staging::Staging(RegistryProtectionDomain& pd)
    : pd_(pd), budget_(std::max<std::uint64_t>(kStagingBytes.read(), 4096)) {}

Staging::~Staging() {
  for (const Buffer& b : buffers_) {
    if (b.bytes) pd_.registry().remove(b.lkey);
  }
}

std::size_t Staging::take_buffer(std::uint64_t bytes) {
  const std::uint64_t wanted = std::max<std::uint64_t>(bytes, 8);
  // The smallest free buffer that fits; else a new one, rounded up to a
  // power of two so that buffers get reused across sizes.
  std::size_t best = buffers_.size();
  std::size_t empty = buffers_.size();
  for (std::size_t i = 0; i < buffers_.size(); ++i) {
    if (!buffers_[i].bytes) empty = i;
    if (buffers_[i].bytes && !buffer_busy_[i] && buffers_[i].bytes.size() >= wanted &&
        (best == buffers_.size() || buffers_[i].bytes.size() < buffers_[best].bytes.size())) {
      best = i;
    }
  }
  if (best == buffers_.size()) {
    std::size_t capacity = 4096;
    while (capacity < wanted) capacity *= 2;
    Buffer b;
    b.bytes = cuda::PinnedBuffer(capacity);
    b.lkey = pd_.registry().add(&pd_, b.bytes.data(), capacity, Access::LocalWrite).lkey;
    if (empty == buffers_.size()) {
      buffers_.push_back(std::move(b));
      buffer_busy_.push_back(false);
    } else {
      buffers_[empty] = std::move(b);
    }
    best = empty;
  }
  buffer_busy_[best] = true;
  return best;
}

std::uint32_t Staging::stage(std::array<Sge, kSoftMaxSge>& sges, std::uint32_t& num_sge, std::uint64_t bytes,
                             const std::array<RegionMemory, kSoftMaxSge>& memory, bool copy_in) {
  std::size_t slot = 0;
  while (slot < staged_.size() && staged_[slot].in_use) ++slot;
  if (slot == staged_.size()) staged_.emplace_back();
  Staged& s = staged_[slot];
  s.in_use = true;
  s.buffer = take_buffer(bytes);
  s.original = sges;
  s.memory = memory;
  s.num_sge = num_sge;
  Buffer& b = buffers_[s.buffer];
  for (std::uint32_t i = 0; i < num_sge; ++i) {
    if (memory[i].type != MemoryType::Host) b.bytes.pin(memory[i].device);
  }
  if (copy_in) {
    std::uint64_t at = 0;
    for (std::uint32_t i = 0; i < num_sge; ++i) {
      copy_piece(b.bytes.data() + at, reinterpret_cast<const void*>(sges[i].addr), sges[i].length, memory[i]);
      at += sges[i].length;
    }
  }
  sges[0] = {reinterpret_cast<std::uint64_t>(b.bytes.data()), static_cast<std::uint32_t>(bytes), b.lkey};
  num_sge = bytes == 0 ? 0 : 1;
  return static_cast<std::uint32_t>(slot + 1);
}

void Staging::stage_send(SendEntry& entry, const std::array<RegionMemory, kSoftMaxSge>& memory) {
  const std::uint64_t bytes = entry.total;
  entry.staging = stage(entry.sges, entry.num_sge, bytes, memory, carries_payload(entry.opcode));
  staged_[entry.staging - 1].send_bytes = bytes;
  send_bytes_ += bytes;
}

void Staging::stage_recv(RecvEntry& entry, const std::array<RegionMemory, kSoftMaxSge>& memory) {
  entry.staging = stage(entry.sges, entry.num_sge, entry.capacity, memory, false);
}

bool Staging::settle(std::uint32_t handle, bool copy_out, std::uint64_t bytes, std::string& why) {
  if (handle == 0 || !copy_out) return true;
  const Staged& s = staged_[handle - 1];
  const char* from = buffers_[s.buffer].bytes.data();
  MemoryRegistry::Reader reader(pd_.registry());
  for (std::uint32_t i = 0; i < s.num_sge && bytes > 0; ++i) {
    const Sge& sge = s.original[i];
    const std::uint64_t n = std::min<std::uint64_t>(sge.length, bytes);
    const AccessCheck verdict = reader.check(false, &pd_, sge.lkey, sge.addr, n, Access::LocalWrite);
    if (verdict != AccessCheck::Ok) {
      why = "local SGE " + std::to_string(i) + " (staged through host memory): " + to_string(verdict);
      return false;
    }
    copy_piece(reinterpret_cast<void*>(sge.addr), from, n, s.memory[i]);
    from += n;
    bytes -= n;
  }
  return true;
}

void Staging::release(std::uint32_t handle) {
  if (handle == 0) return;
  Staged& s = staged_[handle - 1];
  buffer_busy_[s.buffer] = false;
  s.in_use = false;
  send_bytes_ -= s.send_bytes;
  s.send_bytes = 0;
  trim_cache();
}

void Staging::trim_cache() {
  for (;;) {
    std::uint64_t cached = 0;
    std::size_t largest = buffers_.size();
    for (std::size_t i = 0; i < buffers_.size(); ++i) {
      if (!buffers_[i].bytes || buffer_busy_[i]) continue;
      cached += buffers_[i].bytes.size();
      if (largest == buffers_.size() || buffers_[i].bytes.size() > buffers_[largest].bytes.size()) largest = i;
    }
    if (cached <= budget_) return;
    // From under the QP's lock, which remove() would wait for.
    pd_.registry().remove_unshared(buffers_[largest].lkey);
    buffers_[largest] = Buffer{};
  }
}

}  // namespace rdmx::core
