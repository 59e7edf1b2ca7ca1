// SPDX-License-Identifier: MIT
// The work queues of a software RC queue pair (the tcp and shm providers):
// what a posted send or receive keeps until it completes, in the fixed-size
// rings that max_send_wr and max_recv_wr size.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "rdmx/verbs.hpp"
#include "services/wait.hpp"

namespace rdmx::core {

constexpr std::uint32_t kSoftMaxSge = 16;

// Message sequence numbers wrap; compare them as serial numbers.
inline bool msn_before(std::uint32_t a, std::uint32_t b) { return static_cast<std::int32_t>(a - b) < 0; }

// READ and atomics complete with their answer, not with an acknowledgement.
inline bool needs_response(Opcode op) {
  return op == Opcode::RdmaRead || op == Opcode::AtomicFetchAdd || op == Opcode::AtomicCmpSwap;
}
inline bool consumes_receive(Opcode op) {
  return op == Opcode::Send || op == Opcode::SendWithImm || op == Opcode::RdmaWriteWithImm;
}

struct SendEntry {
  std::uint64_t wr_id;
  Opcode opcode;
  bool signaled;
  std::uint32_t imm;
  std::uint64_t remote_addr;
  std::uint32_t rkey;
  std::uint64_t compare_add;
  std::uint64_t swap;
  std::array<Sge, kSoftMaxSge> sges;
  std::uint32_t num_sge;
  std::uint64_t total;
  std::uint32_t msn;
  bool response_done;            // READ / atomic: the answer has arrived
  std::uint64_t response_bytes;  // READ: bytes of the answer placed so far (where answers come in pieces)
  bool ack_requested;            // the responder was asked to acknowledge this one at once
  bool rnr_seen;                 // the responder had no receive for it: its RNR clock runs
  Clock::time_point first_rnr;
  std::uint32_t staging;  // its device memory is carried through a host buffer (core::Staging), else 0
  bool awaiting_staging;  // its device memory waits for room in the staging budget (not sent yet)
  bool device_payload;    // its payload includes device memory the transport copies as it sends it
};

struct RecvEntry {
  std::uint64_t wr_id;
  std::array<Sge, kSoftMaxSge> sges;
  std::uint32_t num_sge;
  std::uint64_t capacity;
  std::uint32_t staging;  // as in SendEntry
};

// A FIFO of entries in a ring of fixed capacity.
template <class Entry>
class WorkRing {
 public:
  void resize(std::size_t capacity) { slots_.resize(capacity); }
  std::size_t capacity() const { return slots_.size(); }
  std::size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  bool full() const { return count_ == slots_.size(); }
  Entry& front() { return slots_[head_]; }
  const Entry& front() const { return slots_[head_]; }
  // The entry `index` places behind the oldest.
  Entry& at(std::size_t index) { return slots_[(head_ + index) % slots_.size()]; }
  // Appends a slot for the caller to fill (the ring must not be full).
  Entry& push() {
    Entry& slot = slots_[(head_ + count_) % slots_.size()];
    ++count_;
    return slot;
  }
  void pop() {
    head_ = (head_ + 1) % slots_.size();
    --count_;
  }

 private:
  std::vector<Entry> slots_;
  std::size_t head_ = 0;
  std::size_t count_ = 0;
};

}  // namespace rdmx::core
