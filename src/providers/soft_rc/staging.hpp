// SPDX-License-Identifier: MIT
// The requester's side of device memory in the software RC engine (tcp and
// shm; docs/GPU.md): a work request whose local buffers include device
// memory is carried through a host buffer of the QP's, registered in its
// protection domain, so the transports touch host memory only. Payloads
// (SEND, WRITE) are copied in when the request is staged; what arrives (READ
// answers, atomic results, received messages) is copied out before the
// completion is reported, after checking that the original buffers are
// still registered, as the transport checks its own.
//
// Requests hold at most RDMX_CUDA_STAGING_BYTES of host memory at a time (a
// larger one alone): the engine stages the rest in order as room frees, so
// many large device requests in flight cost a bounded amount of host memory,
// and the buffers cached for reuse stay within the same bound.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "driver/memory_registry.hpp"
#include "providers/soft_rc/queues.hpp"
#include "services/cuda/pinned.hpp"

namespace rdmx::core {

class Staging {
 public:
  explicit Staging(RegistryProtectionDomain& pd);
  ~Staging();
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  // Whether the checked SGE behind `verdict` needs staging.
  static bool needs(const MemoryRegistry::Verdict& verdict) { return verdict.memory.type != MemoryType::Host; }

  // Whether a send request of `bytes` may be staged now: it fits beside the
  // send requests staged, or none is.
  bool has_room(std::uint64_t bytes) const { return send_bytes_ == 0 || send_bytes_ + bytes <= budget_; }
  // Points `entry` (its SGEs checked, `memory[i]` the memory of SGE i) at a
  // host buffer, copying payloads in; records the handle in the entry.
  void stage_send(SendEntry& entry, const std::array<RegionMemory, kSoftMaxSge>& memory);
  void stage_recv(RecvEntry& entry, const std::array<RegionMemory, kSoftMaxSge>& memory);
  // Before a successful completion of a staged entry: copies the first
  // `bytes` that arrived into the original buffers (a send entry's only when
  // it is a READ or an atomic). False, with `why`, when an original buffer
  // is no longer registered with the right: the completion is then an error.
  bool settle(std::uint32_t handle, bool copy_out, std::uint64_t bytes, std::string& why);
  // The entry left its queue: its buffer is free again.
  void release(std::uint32_t handle);

 private:
  struct Buffer {
    cuda::PinnedBuffer bytes;  // page-locked once device memory is copied through it
    std::uint32_t lkey = 0;
  };
  struct Staged {
    std::size_t buffer = 0;        // index in buffers_
    std::uint64_t send_bytes = 0;  // of a send request, counted against the budget
    std::array<Sge, kSoftMaxSge> original{};
    std::array<RegionMemory, kSoftMaxSge> memory{};
    std::uint32_t num_sge = 0;
    bool in_use = false;
  };
  // A free buffer of at least `bytes` (registered once, kept for reuse).
  std::size_t take_buffer(std::uint64_t bytes);
  std::uint32_t stage(std::array<Sge, kSoftMaxSge>& sges, std::uint32_t& num_sge, std::uint64_t bytes,
                      const std::array<RegionMemory, kSoftMaxSge>& memory, bool copy_in);
  // Frees cached buffers, largest first, until the free ones fit the budget.
  void trim_cache();

  RegistryProtectionDomain& pd_;
  std::uint64_t budget_;
  std::uint64_t send_bytes_ = 0;
  std::vector<Buffer> buffers_;  // a freed buffer leaves an empty slot for the next
  std::vector<bool> buffer_busy_;
  std::vector<Staged> staged_;  // handle = index + 1
};

}  // namespace rdmx::core
