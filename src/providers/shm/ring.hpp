// SPDX-License-Identifier: MIT
// The shared segment of one shm QP connection and the two single-producer,
// single-consumer rings in it (one per direction).
//
// A ring is an array of 64-byte slots. A record is a header slot followed by
// payload slots; it never wraps (a PAD record fills the end of the ring
// instead), so its payload is contiguous. The header's stamp is written last,
// with release order, and equals the record's absolute slot position + 1: the
// consumer polls the one cache line it will read anyway, so an 8-byte message
// costs one cache-line transfer, and a stale slot from the previous lap never
// looks valid. The consumer publishes its position (head) for the producer,
// which reads it only when the ring looks full.
//
// The responder (the consumer of a request ring) also publishes `executed`:
// every request with a smaller message sequence number (MSN) has been
// executed. That is the cumulative acknowledgement; READ and atomic answers
// travel as records in the other ring before `executed` passes them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "services/wait.hpp"

namespace rdmx::shm {

constexpr std::size_t kSlot = 64;
constexpr std::uint32_t kSegmentMagic = 0x52444d53;  // "SMDR"
constexpr std::uint32_t kSegmentVersion = 2;

enum class RecordType : std::uint8_t {
  Pad = 1,
  Send,
  Write,
  Read,
  FetchAdd,
  CmpSwap,
  ReadResponse,
  AtomicResponse,
  RnrNak,  // a SEND found no receive; the requester starts its RNR clock
  Nak,     // the request was refused; `arg0` is the status the requester reports
  Bye,     // the sender's QP entered ERROR (its process lives on)
  Revoke,  // the sender deregisters its region `arg0` (an rkey) that we mapped: close it now
};

enum RecordFlags : std::uint8_t {
  kWithImm = 1,      // SEND/WRITE carry `imm`
  kCrossMemory = 2,  // the payload is a list of the initiator's buffers (addr, length) to copy with
                     // process_vm_readv/writev, not the bytes themselves
  kAckRequest = 4,   // publish `executed` right after this request (a completion waits for it)
};

// The header slot of a record (64 bytes).
struct Record {
  std::atomic<std::uint32_t> stamp;
  RecordType type;
  std::uint8_t flags;
  std::uint16_t slots;  // slots of the whole record, header included
  std::uint32_t msn;
  std::uint32_t rkey;
  std::uint32_t imm;
  std::uint32_t length;  // message bytes (inline, or copied across memories)
  std::uint64_t remote_addr;
  std::uint64_t arg0;     // atomics: compare/add; Nak: status; AtomicResponse: the old value
  std::uint64_t arg1;     // CmpSwap: swap
  std::uint8_t data[16];  // the first inline bytes; the rest follow in the next slots
};
static_assert(sizeof(Record) == kSlot);
constexpr std::size_t kHeaderInline = sizeof(Record::data);

// One initiator buffer of a cross-memory record.
struct RemoteIov {
  std::uint64_t addr;
  std::uint64_t length;
};

inline std::uint32_t slots_for(std::size_t payload) {
  if (payload <= kHeaderInline) return 1;
  return static_cast<std::uint32_t>(1 + (payload - kHeaderInline + kSlot - 1) / kSlot);
}

struct alignas(64) RingControl {
  std::atomic<std::uint64_t> head;      // consumer: slots consumed
  std::atomic<std::uint32_t> executed;  // consumer as responder: requests executed (MSN)
  char pad0[64 - 12];
  // The consumer's engine is about to block: the producer wakes it through the socket.
  std::atomic<std::uint32_t> sleeping;
  char pad1[60];
  // A line of its own, read by the consumer for each request and written
  // only when the producer fails, or by the consumer during a cross-memory
  // copy: in steady state it stays cached on both sides.
  //
  // The producer's QP entered ERROR: the consumer executes none of its
  // requests any more, so none touches the producer's memory. A pair with
  // `busy` (each side stores its word, then reads the other's, both
  // sequentially consistent): the producer flushes its work only after it
  // saw no copy into its memory running, and the consumer starts copies
  // only while it saw `closed` clear. A copy out of the producer's memory
  // is not waited for (a stopped consumer would hold the producer's error
  // for RDMX_TIMEOUT): its buffers may change once flushed, so the consumer
  // looks at `closed` again after such a copy and delivers nothing of it
  // (no held-back last word, no completion) when it is set.
  std::atomic<std::uint32_t> closed;
  // The consumer's cross-memory copy for a request: a PeerCopy.
  std::atomic<std::uint32_t> busy;
  // Rung by the consumer when it clears `busy` after `closed` was set.
  core::WakeWords busy_cleared;
  char pad2[64 - 8 - sizeof(core::WakeWords)];
};
static_assert(sizeof(RingControl) == 192);

// RingControl::busy: what the consumer's running copy does to the producer's memory.
enum PeerCopy : std::uint32_t {
  kNoPeerCopy = 0,
  kCopyOutOfProducer = 1,  // a SEND's or WRITE's payload
  kCopyIntoProducer = 2,   // a READ's answer
};

// The consumer's cross-memory copy is over (RingControl::busy): a producer
// that failed meanwhile waits for this.
inline void end_peer_copy(RingControl& control) {
  control.busy.store(kNoPeerCopy, std::memory_order_seq_cst);
  if (control.closed.load(std::memory_order_seq_cst) != 0) core::ring(control.busy_cleared);
}

struct SegmentHeader {
  std::uint32_t magic;
  std::uint32_t version;
  std::uint32_t ring_slots;  // per direction, a power of two
  std::uint32_t reserved;
  char pad[48];
  RingControl ring[2];  // [0]: initiator -> acceptor, [1]: acceptor -> initiator
};

inline std::size_t segment_size(std::uint32_t ring_slots) {
  return sizeof(SegmentHeader) + 2 * static_cast<std::size_t>(ring_slots) * kSlot;
}

// Ring slots per direction: 4096 x 64 B = 256 KiB, room for 16 eager messages of 16 KiB.
constexpr std::uint32_t kRingSlots = 4096;

// The producer's end of a ring.
class RingProducer {
 public:
  RingProducer() = default;
  RingProducer(RingControl* control, std::uint8_t* data, std::uint32_t slots)
      : control_(control), data_(data), slots_(slots) {}
  bool attached() const { return data_ != nullptr; }

  // Reserves a record of `payload` bytes; returns its header or nullptr when
  // the ring is full. Fill it, then publish().
  Record* reserve(std::size_t payload) {
    const std::uint32_t need = slots_for(payload);
    const std::uint64_t index = tail_ % slots_;
    const std::uint32_t pad = index + need > slots_ ? static_cast<std::uint32_t>(slots_ - index) : 0;
    if (need + pad > slots_) return nullptr;
    if (tail_ + need + pad - head_cache_ > slots_) {
      head_cache_ = control_->head.load(std::memory_order_acquire);
      if (tail_ + need + pad - head_cache_ > slots_) return nullptr;
    }
    if (pad != 0) {
      auto* r = slot(tail_);
      r->type = RecordType::Pad;
      r->slots = static_cast<std::uint16_t>(pad);
      r->stamp.store(static_cast<std::uint32_t>(tail_ + 1), std::memory_order_release);
      tail_ += pad;
    }
    auto* r = slot(tail_);
    r->slots = static_cast<std::uint16_t>(need);
    r->flags = 0;
    pending_ = need;
    return r;
  }
  // The record reserved last becomes visible to the consumer.
  void publish(Record* r) {
    r->stamp.store(static_cast<std::uint32_t>(tail_ + 1), std::memory_order_release);
    tail_ += pending_;
  }

 private:
  Record* slot(std::uint64_t position) { return reinterpret_cast<Record*>(data_ + (position % slots_) * kSlot); }
  RingControl* control_ = nullptr;
  std::uint8_t* data_ = nullptr;
  std::uint32_t slots_ = 0;
  std::uint64_t tail_ = 0;
  std::uint64_t head_cache_ = 0;
  std::uint32_t pending_ = 0;
};

// The consumer's end of a ring.
class RingConsumer {
 public:
  RingConsumer() = default;
  RingConsumer(RingControl* control, std::uint8_t* data, std::uint32_t slots)
      : control_(control), data_(data), slots_(slots) {}
  bool attached() const { return data_ != nullptr; }

  // Where the next record's stamp will appear, and its value then.
  const std::atomic<std::uint32_t>* next_stamp() const {
    return &reinterpret_cast<const Record*>(data_ + (head_ % slots_) * kSlot)->stamp;
  }
  std::uint32_t next_stamp_value() const { return static_cast<std::uint32_t>(head_ + 1); }

  // The next record (PAD included), or nullptr when none is published; with
  // `offset`, the record that many slots past the next one (the slots in
  // between must hold published records, whose sizes lead to it).
  const Record* peek(std::uint64_t offset = 0) const {
    const std::uint64_t at = head_ + offset;
    auto* r = reinterpret_cast<const Record*>(data_ + (at % slots_) * kSlot);
    if (r->stamp.load(std::memory_order_acquire) != static_cast<std::uint32_t>(at + 1)) return nullptr;
    return r;
  }
  // Slots consumed so far (the head's absolute position).
  std::uint64_t position() const { return head_; }
  // Releases the record returned by peek() (`slots` as validated by
  // well_formed()); the producer sees it at flush().
  void pop(std::uint16_t slots) { head_ += slots; }
  // Slots consumed since the last flush().
  std::uint64_t unflushed() const { return head_ - flushed_; }
  // Slots left before the end of the ring, from the head (plus `offset`).
  std::uint32_t slots_to_end(std::uint64_t offset = 0) const {
    return static_cast<std::uint32_t>(slots_ - (head_ + offset) % slots_);
  }
  void flush() {
    if (flushed_ != head_) control_->head.store(head_, std::memory_order_release);
    flushed_ = head_;
  }
  // The payload of a record: `length` bytes from its data field on (contiguous).
  static const std::uint8_t* payload(const Record* r) { return r->data; }
  // A record (at the head, or `offset` slots past it) is well formed when its
  // slot count fits the ring and covers its payload.
  bool well_formed(std::uint16_t slots, std::size_t payload_bytes, std::uint64_t offset = 0) const {
    return slots >= 1 && slots <= slots_to_end(offset) && slots_for(payload_bytes) <= slots;
  }

 private:
  RingControl* control_ = nullptr;
  const std::uint8_t* data_ = nullptr;
  std::uint32_t slots_ = 0;
  std::uint64_t head_ = 0;
  std::uint64_t flushed_ = 0;
};

}  // namespace rdmx::shm
