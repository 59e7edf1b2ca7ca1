// SPDX-License-Identifier: MIT
// The responder of a shm QP: the peer's requests are executed in ring order
// under our region table: inline bytes copied, large ones pulled or pushed
// with one process_vm_readv/writev, READ and atomic answers put in our
// outbound ring, and what is refused NAKed (both QPs then fail, as in IB).
#include <sys/uio.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

#include "driver/ordered_placement.hpp"
#include "driver/work_request.hpp"
#include "providers/shm/cross_memory.hpp"
#include "providers/shm/shm_qp.hpp"
#include "services/cuda/copy.hpp"
#include "services/race_annotations.hpp"

namespace rdmx::shm {

using core::hex;

namespace {

// The initiator's buffers listed in a cross-memory record (its count was
// checked against kMaxSge when the record was accepted), as iovecs.
int remote_iovecs(const Record* r, iovec* out) {
  const auto* list = reinterpret_cast<const RemoteIov*>(RingConsumer::payload(r));
  const auto count = static_cast<int>(r->arg1);
  for (int i = 0; i < count; ++i) {
    RemoteIov piece;
    std::memcpy(&piece, list + i, sizeof(piece));
    out[i] = {reinterpret_cast<void*>(piece.addr), piece.length};
  }
  return count;
}

std::uint64_t covered(const iovec* iov, int count) {
  std::uint64_t sum = 0;
  for (int i = 0; i < count; ++i) sum += iov[i].iov_len;
  return sum;
}

// Device memory is reached through the driver, never with the CPU, and the
// kernel's cross-memory attach cannot reach it either: large transfers to or
// from it go through a host buffer, a piece at a time.
constexpr std::uint64_t kDevicePiece = 4 << 20;

bool on_device(const core::RegionMemory& memory) { return memory.type != MemoryType::Host; }

// A WRITE of `length` bytes into device memory at `target`, its last word
// last (DeviceCaps::ordered_write_placement): from the ring's payload, or
// pulled from the initiator (`pid`, `remote`) through a host buffer.
// Returns the bytes placed: fewer when pulling failed (errno set), or when
// the initiator's QP failed meanwhile (its last word is then not placed).
std::uint64_t write_to_device(char* target, std::uint64_t length, const core::RegionMemory& memory,
                              const std::uint8_t* inline_payload, pid_t pid, const iovec* remote, int remote_count,
                              char* piece, const std::atomic<std::uint32_t>& producer_closed) {
  const bool hold = core::has_last_word(reinterpret_cast<std::uint64_t>(target), length);
  const std::uint64_t body = hold ? length - 8 : length;
  auto place = [&](std::uint64_t at, std::uint64_t n) {
    core::cuda::copy_memory(target + at, inline_payload + at, n, memory.device, "shm WRITE into device memory");
  };
  if (inline_payload != nullptr) {
    place(0, body);
    if (hold) place(body, 8);
    return length;
  }
  auto pull = [&](std::uint64_t at, std::uint64_t n) {
    iovec from[kMaxSge];
    const int from_count = tail_iovecs(remote, remote_count, at, from);
    iovec into{piece, n};
    if (read_from_process(pid, &into, 1, from, from_count, n) != static_cast<ssize_t>(n)) return false;
    core::cuda::copy_memory(target + at, piece, n, memory.device, "shm WRITE into device memory");
    return true;
  };
  std::uint64_t at = 0;
  while (at < body) {
    const std::uint64_t n = std::min(body - at, kDevicePiece);
    if (!pull(at, n)) return at;
    at += n;
  }
  if (hold && (producer_closed.load(std::memory_order_seq_cst) != 0 || !pull(body, 8))) return body;
  return length;
}

// Marks a cross-memory copy of the peer's memory as running
// (RingControl::busy) for as long as it lives, unless the peer's QP failed.
class PeerMemoryCopy {
 public:
  PeerMemoryCopy(RingControl* control, PeerCopy what) : control_(control) {
    control_->busy.store(what, std::memory_order_seq_cst);
    if (control_->closed.load(std::memory_order_seq_cst) != 0) end();
  }
  PeerMemoryCopy(const PeerMemoryCopy&) = delete;
  PeerMemoryCopy& operator=(const PeerMemoryCopy&) = delete;
  ~PeerMemoryCopy() { end(); }
  bool allowed() const { return control_ != nullptr; }
  void end() {
    if (control_ == nullptr) return;
    end_peer_copy(*control_);
    control_ = nullptr;
  }

 private:
  RingControl* control_;
};

}  // namespace

void ShmQp::recv_queued_locked() {
  if (!peer_gone_.empty()) return fail_locked(peer_gone_, WcStatus::WrFlushErr);
  // A SEND held for want of a receive can go now, without waiting for the engine.
  if (rnr_nak_sent_) poll_locked();
}

// ---------------------------------------------------------------------------
// Responder.

ShmQp::Step ShmQp::execute_request_locked(const Record* r, std::uint16_t slots) {
  core::acquire_remote_placements();  // what the application did with the target before it let the peer in
  const RecordType type = r->type;
  const std::uint8_t flags = r->flags;
  const std::uint32_t msn = r->msn;
  const std::uint32_t length = r->length;
  if (in_control_->closed.load(std::memory_order_acquire) != 0) return drop_request_of_closed_peer_locked();
  if (msn != expected_msn_) {
    protocol_error_locked("request msn " + std::to_string(msn) + " where " + std::to_string(expected_msn_) +
                          " was expected");
    return Step::Failed;
  }
  const bool cross = (flags & kCrossMemory) != 0;
  const std::uint64_t iov_count = cross ? r->arg1 : 0;
  const bool payload_op = type == RecordType::Send || type == RecordType::Write;
  std::size_t payload = cross ? iov_count * sizeof(RemoteIov) : (payload_op ? length : 0);
  if (iov_count > kMaxSge ||
      (cross && type != RecordType::Send && type != RecordType::Write && type != RecordType::Read) ||
      !in_.well_formed(slots, payload)) {
    protocol_error_locked("malformed " + std::to_string(static_cast<int>(type)) + " request record (msn " +
                          std::to_string(msn) + ", " + std::to_string(slots) + " slots, length " +
                          std::to_string(length) + ")");
    return Step::Failed;
  }
  const bool with_imm = (flags & kWithImm) != 0;
  const bool consumes_recv = type == RecordType::Send || (type == RecordType::Write && with_imm);
  if (consumes_recv && rq_.empty()) {
    // RNR: hold the request until a receive is posted; the requester's clock decides when to give up.
    if (!rnr_nak_sent_) {
      if (!push_control_locked(RecordType::RnrNak, msn, 0)) return Step::Stall;
      rnr_nak_sent_ = true;
      wake_peer_locked();
    }
    return Step::Stall;
  }
  // The peer may fail while this copy runs: it waits for a copy into its
  // memory to end before it flushes the buffer; of a copy out of it,
  // deliver_locked places nothing more once it sees the failure.
  std::optional<PeerMemoryCopy> copy;
  if (cross) {
    copy.emplace(in_control_, type == RecordType::Read ? kCopyIntoProducer : kCopyOutOfProducer);
    if (!copy->allowed()) return drop_request_of_closed_peer_locked();
  }
  Step step = Step::Done;
  switch (type) {
    case RecordType::Send:
    case RecordType::Write: {
      RecvEntry recv{};
      if (consumes_recv) recv = rq_.front();
      step = deliver_locked(r, consumes_recv ? &recv : nullptr, r->remote_addr, type == RecordType::Send);
      if (step == Step::Dropped) return Step::Done;
      if (step != Step::Done) return step;
      if (consumes_recv) {
        rq_.pop();
        push_recv_completion_locked(recv, WcStatus::Success,
                                    type == RecordType::Send ? WcOpcode::Recv : WcOpcode::RecvRdmaWithImm, length,
                                    with_imm, r->imm);
      }
      break;
    }
    case RecordType::Read: step = answer_read_locked(r); break;
    case RecordType::FetchAdd:
    case RecordType::CmpSwap: step = answer_atomic_locked(r); break;
    default: break;
  }
  if (step != Step::Done) return step;
  // A region peers may reach directly (allocated, heap, shared device
  // memory) is offered to the peer the first time it uses it, so its later
  // WRITEs and READs go there without this side's threads.
  if ((type == RecordType::Write || type == RecordType::Read) && length > 0) {
    if (!cross) {
      if (remote_key_.verdict().shared != nullptr) offer_region_locked(r->rkey, remote_key_.verdict());
    } else if (core::MemoryRegistry::Verdict v; pd_.registry().lookup(true, r->rkey, &v)) {
      offer_region_locked(r->rkey, v);
    }
  }
  // A SEND held for want of a receive has an RNR clock running at the
  // requester: say at once that it ran, so the clock stops.
  if ((flags & kAckRequest) != 0 || rnr_nak_sent_) ack_now_ = true;
  rnr_nak_sent_ = false;
  ++expected_msn_;
  return Step::Done;
}

ShmQp::Step ShmQp::deliver_locked(const Record* r, const RecvEntry* recv, std::uint64_t target_addr, bool to_recv) {
  const std::uint32_t msn = r->msn;
  const std::uint32_t length = r->length;
  const std::uint32_t rkey = r->rkey;
  const bool cross = (r->flags & kCrossMemory) != 0;
  iovec local[kMaxSge];
  int local_count = 0;
  WcStatus recv_status = WcStatus::Success;
  WcStatus nak_status = WcStatus::Success;
  std::string why;
  core::RegionMemory target_memory;
  {
    // Cross-memory copies can be long: they hold the registry's lock, which
    // deregistration waits for; inline copies rely on the cached verdicts.
    std::optional<core::MemoryRegistry::Reader> reader;
    if (cross) reader.emplace(pd_.registry());
    // Through the reader, a remote check also sets target_memory.
    auto check = [&](bool remote, std::uint32_t key, std::uint64_t addr, std::uint64_t len, Access need) {
      return reader ? reader->check(remote, &pd_, key, addr, len, need, remote ? &target_memory : nullptr)
                    : (remote ? remote_key_ : local_key_).check(pd_.registry(), remote, &pd_, key, addr, len, need);
    };
    if (to_recv) {
      if (length > recv->capacity) {
        recv_status = WcStatus::LocLenErr;
        nak_status = WcStatus::RemInvReqErr;
        why = "SEND of " + std::to_string(length) + " bytes into a receive of " + std::to_string(recv->capacity);
      } else {
        local_count = sge_iovecs(recv->sges, recv->num_sge, length, local);
        for (int i = 0; i < local_count; ++i) {
          auto verdict = check(false, recv->sges[i].lkey, reinterpret_cast<std::uint64_t>(local[i].iov_base),
                               local[i].iov_len, Access::LocalWrite);
          if (verdict != core::AccessCheck::Ok) {
            recv_status = WcStatus::LocProtErr;
            nak_status = WcStatus::RemOpErr;
            why = "receive wr_id " + std::to_string(recv->wr_id) + " SGE " + std::to_string(i) + ": " +
                  core::to_string(verdict);
            break;
          }
        }
      }
    } else if (length > 0) {
      auto verdict = check(true, rkey, target_addr, length, Access::RemoteWrite);
      if (verdict != core::AccessCheck::Ok) {
        nak_status = WcStatus::RemAccessErr;
        why = "WRITE of " + std::to_string(length) + " bytes to " + hex(target_addr) + " rkey " + hex(rkey) + ": " +
              core::to_string(verdict);
      } else {
        if (!reader) target_memory = remote_key_.verdict().memory;
        local[0] = {reinterpret_cast<void*>(target_addr), length};
        local_count = 1;
      }
    }
    if (nak_status == WcStatus::Success && length > 0 && on_device(target_memory)) {
      iovec remote[kMaxSge];
      const int count = cross ? remote_iovecs(r, remote) : 0;
      std::uint64_t placed = 0;
      try {
        if (cross && covered(remote, count) != length) {
          nak_status = WcStatus::RemInvReqErr;
          why = "the request's buffer list does not cover its length";
        } else {
          placed = write_to_device(reinterpret_cast<char*>(target_addr), length, target_memory,
                                   cross ? nullptr : RingConsumer::payload(r), peer_pid_, remote, count,
                                   cross ? device_piece_.ready(kDevicePiece, target_memory.device) : nullptr,
                                   in_control_->closed);
          if (placed != length) {
            nak_status = WcStatus::RemOpErr;
            why = "copying " + std::to_string(length) + " bytes from pid " + std::to_string(peer_pid_) +
                  " into device memory failed after " + std::to_string(placed) + ": " + std::strerror(errno);
          }
        }
      } catch (const Error& e) {
        nak_status = WcStatus::RemOpErr;
        why = "WRITE into device memory at " + hex(target_addr) + ": " + e.message();
      }
    } else if (nak_status == WcStatus::Success && length > 0) {
      // A WRITE's last word is stored last (DeviceCaps::ordered_write_placement).
      const bool hold = !to_recv && core::has_last_word(target_addr, length);
      if (!cross) {
        const std::uint8_t* from = RingConsumer::payload(r);
        for (int i = 0; i < local_count; ++i) {
          if (hold && i == local_count - 1) {
            core::copy_last_word_last(local[i].iov_base, from, local[i].iov_len);
          } else {
            std::memcpy(local[i].iov_base, from, local[i].iov_len);
          }
          from += local[i].iov_len;
        }
      } else {
        iovec remote[kMaxSge];
        const int count = remote_iovecs(r, remote);
        const std::uint64_t sum = covered(remote, count);
        if (sum != length) {
          nak_status = WcStatus::RemInvReqErr;
          why = "the request's buffer list covers " + std::to_string(sum) + " bytes, not " + std::to_string(length);
        } else {
          // Held back: the last word comes into `tail` and is stored after the rest.
          char tail[8];
          iovec* last = &local[local_count - 1];
          if (hold) last->iov_len -= 8;
          const std::uint64_t body = hold ? length - 8 : length;
          ssize_t n = read_from_process(peer_pid_, local, local_count, remote, count, body);
          if (hold && n == static_cast<ssize_t>(body) && !producer_closed()) {
            iovec tail_iov{tail, 8};
            iovec from_iov[kMaxSge];
            const int from_count = tail_iovecs(remote, count, body, from_iov);
            if (read_from_process(peer_pid_, &tail_iov, 1, from_iov, from_count, 8) == 8) {
              core::store_last_word(static_cast<char*>(last->iov_base) + last->iov_len, tail);
              n += 8;
            }
          }
          if (n != static_cast<ssize_t>(length)) {
            int error = n < 0 ? errno : EFAULT;
            nak_status = WcStatus::RemOpErr;
            why = "copying " + std::to_string(length) + " bytes from pid " + std::to_string(peer_pid_) +
                  " failed after " + std::to_string(n < 0 ? 0 : n) + ": " + std::strerror(error);
          }
        }
      }
    }
  }
  // The producer failed while its payload was copied and may have changed
  // it since (RingControl::closed): the copy is neither finished nor completed.
  if (cross && producer_closed()) {
    drop_request_of_closed_peer_locked();
    return Step::Dropped;
  }
  if (nak_status == WcStatus::Success) {
    core::release_remote_placements();
    if (!to_recv && target_memory.doorbell != nullptr) core::ring(*target_memory.doorbell);
    return Step::Done;
  }
  if (recv != nullptr && recv_status != WcStatus::Success) {
    rq_.pop();
    push_recv_completion_locked(*recv, recv_status, WcOpcode::Recv, 0, false, 0);
  }
  nak_locked(msn, nak_status, why);
  return Step::Failed;
}

ShmQp::Step ShmQp::answer_read_locked(const Record* r) {
  const std::uint32_t msn = r->msn;
  const std::uint32_t length = r->length;
  const std::uint64_t addr = r->remote_addr;
  const std::uint32_t rkey = r->rkey;
  const bool cross = (r->flags & kCrossMemory) != 0;
  Record* answer = out_.reserve(cross ? 0 : length);
  if (answer == nullptr) return Step::Stall;
  std::string why;
  WcStatus nak_status = WcStatus::Success;
  core::RegionMemory source;
  {
    std::optional<core::MemoryRegistry::Reader> reader;
    if (cross) reader.emplace(pd_.registry());
    auto verdict = length == 0 ? core::AccessCheck::Ok
                   : reader    ? reader->check(true, &pd_, rkey, addr, length, Access::RemoteRead, &source)
                               : remote_key_.check(pd_.registry(), true, &pd_, rkey, addr, length, Access::RemoteRead);
    if (!reader && length > 0 && verdict == core::AccessCheck::Ok) source = remote_key_.verdict().memory;
    if (verdict != core::AccessCheck::Ok) {
      nak_status = WcStatus::RemAccessErr;
      why = "READ of " + std::to_string(length) + " bytes at " + hex(addr) + " rkey " + hex(rkey) + ": " +
            core::to_string(verdict);
    } else if (on_device(source)) {
      try {
        if (!cross) {
          core::cuda::copy_memory(answer->data, reinterpret_cast<const void*>(addr), length, source.device,
                                  "shm READ from device memory");
        } else {
          iovec remote[kMaxSge];
          const int count = remote_iovecs(r, remote);
          if (covered(remote, count) != length) {
            nak_status = WcStatus::RemInvReqErr;
            why = "the READ's buffer list does not cover its length";
          }
          char* piece = device_piece_.ready(kDevicePiece, source.device);
          for (std::uint64_t at = 0; nak_status == WcStatus::Success && at < length;) {
            const std::uint64_t n = std::min<std::uint64_t>(length - at, kDevicePiece);
            core::cuda::copy_memory(piece, reinterpret_cast<const char*>(addr) + at, n, source.device,
                                    "shm READ from device memory");
            iovec to[kMaxSge];
            const int to_count = tail_iovecs(remote, count, at, to);
            iovec from{piece, n};
            if (write_to_process(peer_pid_, &from, 1, to, to_count, n) != static_cast<ssize_t>(n)) {
              nak_status = WcStatus::RemOpErr;
              why =
                  "copying the READ answer into pid " + std::to_string(peer_pid_) + " failed: " + std::strerror(errno);
            }
            at += n;
          }
        }
      } catch (const Error& e) {
        nak_status = WcStatus::RemOpErr;
        why = "READ from device memory at " + hex(addr) + ": " + e.message();
      }
    } else if (!cross) {
      if (length > 0) std::memcpy(answer->data, reinterpret_cast<const void*>(addr), length);
    } else {
      iovec local{reinterpret_cast<void*>(addr), length};
      iovec remote[kMaxSge];
      const int count = remote_iovecs(r, remote);
      const std::uint64_t sum = covered(remote, count);
      ssize_t n = sum == length ? write_to_process(peer_pid_, &local, 1, remote, count, length) : -2;
      if (n != static_cast<ssize_t>(length)) {
        nak_status = WcStatus::RemOpErr;
        why = n == -2 ? "the READ's buffer list does not cover its length"
                      : "copying the READ answer into pid " + std::to_string(peer_pid_) +
                            " failed: " + std::strerror(n < 0 ? errno : EFAULT);
      }
    }
  }
  if (nak_status != WcStatus::Success) {
    nak_locked(msn, nak_status, why);
    return Step::Failed;
  }
  answer->type = RecordType::ReadResponse;
  answer->flags = cross ? kCrossMemory : 0;
  answer->msn = msn;
  answer->length = length;
  out_.publish(answer);
  return Step::Done;
}

ShmQp::Step ShmQp::answer_atomic_locked(const Record* r) {
  const std::uint32_t msn = r->msn;
  const std::uint64_t addr = r->remote_addr;
  const std::uint32_t rkey = r->rkey;
  const std::uint64_t compare_add = r->arg0;
  const std::uint64_t swap = r->arg1;
  const bool fetch_add = r->type == RecordType::FetchAdd;
  if (addr % 8 != 0) {
    nak_locked(msn, WcStatus::RemInvReqErr, "atomic at unaligned address " + hex(addr));
    return Step::Failed;
  }
  Record* answer = out_.reserve(0);
  if (answer == nullptr) return Step::Stall;
  std::uint64_t old = 0;
  // Hardware atomics on the target's memory, as the tcp provider's: atomic
  // with respect to every other atomic on this host, whichever provider issued it.
  auto verdict = remote_key_.check(pd_.registry(), true, &pd_, rkey, addr, 8, Access::RemoteAtomic);
  if (verdict == core::AccessCheck::Ok && on_device(remote_key_.verdict().memory)) {
    // Read, changed and written back under the device lock: atomic against
    // every other access through this host's engines, not against the GPU's
    // own kernels (as with any staging of device memory).
    const int device = remote_key_.verdict().memory.device;
    try {
      std::uint64_t value = 0;
      core::cuda::copy_memory(&value, reinterpret_cast<const void*>(addr), 8, device, "shm atomic on device memory");
      old = value;
      if (fetch_add || value == compare_add) {
        value = fetch_add ? value + compare_add : swap;
        core::cuda::copy_memory(reinterpret_cast<void*>(addr), &value, 8, device, "shm atomic on device memory");
      }
    } catch (const Error& e) {
      nak_locked(msn, WcStatus::RemOpErr, std::string("atomic on device memory at ") + hex(addr) + ": " + e.message());
      return Step::Failed;
    }
  } else if (verdict == core::AccessCheck::Ok) {
    std::atomic_ref<std::uint64_t> target(*reinterpret_cast<std::uint64_t*>(addr));
    if (fetch_add) {
      old = target.fetch_add(compare_add, std::memory_order_seq_cst);
    } else {
      old = compare_add;
      target.compare_exchange_strong(old, swap, std::memory_order_seq_cst);
    }
  }
  if (verdict != core::AccessCheck::Ok) {
    nak_locked(msn, WcStatus::RemAccessErr,
               std::string(fetch_add ? "FETCH_ADD" : "CMP_SWAP") + " at " + hex(addr) + " rkey " + hex(rkey) + ": " +
                   core::to_string(verdict));
    return Step::Failed;
  }
  answer->type = RecordType::AtomicResponse;
  answer->msn = msn;
  answer->length = 8;
  answer->arg0 = old;
  out_.publish(answer);
  return Step::Done;
}

ShmQp::Step ShmQp::drop_request_of_closed_peer_locked() {
  peer_gone_locked(describe_peer() + "'s QP entered ERROR", false);
  return Step::Done;
}

bool ShmQp::push_control_locked(RecordType type, std::uint32_t msn, std::uint64_t arg0) {
  if (!out_.attached()) return false;
  Record* r = out_.reserve(0);
  if (r == nullptr) return false;
  r->type = type;
  r->msn = msn;
  r->length = 0;
  r->arg0 = arg0;
  out_.publish(r);
  return true;
}

void ShmQp::nak_locked(std::uint32_t msn, WcStatus status, const std::string& why) {
  nak_pending_ = true;
  nak_msn_ = msn;
  nak_status_ = status;
  // As in IB, the responder's QP fails too; the NAK goes out before the socket closes.
  fail_locked("refused request msn " + std::to_string(msn) + " from " + describe_peer() + ": " + why,
              WcStatus::WrFlushErr);
}

}  // namespace rdmx::shm
