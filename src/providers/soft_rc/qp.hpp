// SPDX-License-Identifier: MIT
// What the software RC queue pairs (tcp, shm) do alike, done once: the verbs
// entry points and their checks, the send and receive queues, the move to
// RTS toward a peer, completions, and the move to ERROR that flushes every
// outstanding work request. A provider adds its transport: how requests
// reach the peer, how answers and acknowledgements come back, and what it
// must tear down on error (the hooks below).
//
// Completion order follows InfiniBand: send completions in posting order,
// a WR done when the responder acknowledged it (READ and atomics: when their
// answer arrived); on error the failing WR gets its status, every other
// outstanding WR and receive WR_FLUSH_ERR.
#pragma once

#include <atomic>
#include <cassert>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "driver/completion_queue.hpp"
#include "driver/device_lock.hpp"
#include "driver/memory_registry.hpp"
#include "providers/soft_rc/connection.hpp"
#include "providers/soft_rc/device.hpp"
#include "providers/soft_rc/queues.hpp"
#include "providers/soft_rc/staging.hpp"
#include "rdmx/verbs.hpp"
#include "services/thread_annotations.hpp"
#include "services/wait.hpp"

namespace rdmx::core {

// For the thread-safety analysis the QP itself is the lock of its state
// (lock_state()): its own mutex under tcp, its device's lock under shm.
class RDMX_CAPABILITY("queue pair state") SoftRcQp : public QueuePair {
 public:
  std::uint32_t qp_num() const noexcept final { return qpn_; }
  QpState state() const noexcept final { return state_.load(std::memory_order_acquire); }
  QpCaps caps() const noexcept final { return caps_; }
  DeviceCaps device_caps() const final;
  std::string provider() const final { return provider_; }
  QpAddress local_address() const final { return soft_device_.qp_address(qpn_); }
  std::string error_reason() const final;
  void init() final;
  void set_error(const std::string& reason) final;
  void post_send(const SendWr& wr) final;
  PostResult try_post_send(const SendWr& wr) final;
  void post_recv(const RecvWr& wr) final;

  // ---- the device's calls, device lock held ----
  // Tells the analysis that `held`, the device lock the caller holds, is
  // this QP's (checked in debug builds).
  void device_lock_held([[maybe_unused]] const DeviceLock& held) const RDMX_REQUIRES(held)
      RDMX_ASSERT_CAPABILITY(device_lock_) {
    assert(&held == &device_lock_);
  }
  // Events on the QP's socket; true when anything was done.
  virtual bool on_socket_locked(std::uint32_t events) RDMX_REQUIRES(device_lock_) = 0;
  // True while the QP's timers need scanning soon.
  virtual bool on_timer_locked(Clock::time_point now) RDMX_REQUIRES(device_lock_) = 0;
  // A pending connection whose HELLO names this QP.
  virtual Offer offer_locked(const PendingConnection& pending) RDMX_REQUIRES(device_lock_) = 0;

 protected:
  // `caps`: as granted by the device (core::grant_qp_caps); `device`: the
  // device whose engine drives this QP; `parts`: its PD and CQs, which it
  // holds while it lives.
  SoftRcQp(const char* provider, std::uint32_t qpn, std::uint64_t max_message, const QpParts& parts, const QpCaps& caps,
           SoftRcDevice& device);

  // The lock that guards this QP's state: its own (tcp) or its device's (shm).
  virtual void lock_state() RDMX_ACQUIRE() = 0;
  virtual void unlock_state() RDMX_RELEASE() = 0;
  class RDMX_SCOPED_CAPABILITY StateGuard {
   public:
    explicit StateGuard(SoftRcQp& qp) RDMX_ACQUIRE(qp) : qp_(qp) { qp_.lock_state(); }
    // For const readers: locking is not a change of the QP.
    explicit StateGuard(const SoftRcQp& qp) RDMX_ACQUIRE(qp) : qp_(const_cast<SoftRcQp&>(qp)) { qp_.lock_state(); }
    ~StateGuard() RDMX_RELEASE() { qp_.unlock_state(); }
    StateGuard(const StateGuard&) = delete;
    StateGuard& operator=(const StateGuard&) = delete;

   private:
    SoftRcQp& qp_;
  };

  // ---- hooks, state lock held ----
  // A WRITE or READ the transport can finish at once, without a queue entry
  // (the QP is in RTS); true when it did.
  virtual bool post_direct_locked(const SendWr& /*wr*/, std::uint64_t /*total*/) RDMX_REQUIRES(this) { return false; }
  // A send WR was queued, its local buffers checked: start it.
  virtual void send_queued_locked(SendEntry& entry) RDMX_REQUIRES(this) = 0;
  // A receive was queued.
  virtual void recv_queued_locked() RDMX_REQUIRES(this) {}
  // Whether the transport copies SEND and WRITE payloads out of device
  // memory itself, piece by piece as it sends them (SendEntry::device_payload):
  // the copy of one piece then overlaps the transfer of the one before, and
  // the host memory it takes is one piece's. Otherwise they are staged whole.
  virtual bool copies_device_payloads() const { return false; }
  // The QP entered ERROR; nothing was flushed yet. Returns once the peer
  // touches no more of this QP's local memory (a peer that copies into or
  // out of it on its own: no flushed buffer may change after its flush).
  virtual void stop_peer_access_locked() RDMX_REQUIRES(this) {}
  // The QP entered ERROR and its send queue was flushed (its receive queue
  // is flushed next): stop the transport and tell the peer.
  virtual void error_entered_locked() RDMX_REQUIRES(this) = 0;
  // Whether the peer left in order (so the move to ERROR is logged as
  // information, not as a warning, when nothing was outstanding).
  virtual bool peer_left_in_order_locked(const std::string& reason) const RDMX_REQUIRES(this) = 0;
  // An entry left the send queue completed (not flushed).
  virtual void retired_locked(const SendEntry& /*entry*/) RDMX_REQUIRES(this) {}

  // ---- for the provider, state lock held ----
  struct Peer {
    std::uint64_t nonce;  // of the peer's device
    std::uint32_t qpn;
    std::string address;  // printable
  };
  // connect()'s part every provider shares: INIT (from RESET) to RTS toward
  // `peer`, remembering how to name it; throws when the QP is not in INIT or
  // `peer` is this QP. The side with the lower (nonce, qpn) initiates.
  void begin_connect_locked(std::uint64_t own_nonce, const Peer& peer, const ConnectOptions& options,
                            const std::string& detail) RDMX_REQUIRES(this);
  // Moves to ERROR: the WR with `failing_msn` (default: the oldest) completes
  // with `status`, every other outstanding WR and receive with WR_FLUSH_ERR.
  void fail_locked(const std::string& reason, WcStatus status, std::optional<std::uint32_t> failing_msn = {})
      RDMX_REQUIRES(this);
  // Completes, oldest first, the first `sent` send-queue entries that are
  // done: acknowledged (before acked_msn_), or for READ and atomics answered.
  void complete_done_locked(std::size_t sent) RDMX_REQUIRES(this);
  // Removes the (completed) entry at the head of the send queue.
  void retire_head_locked() RDMX_REQUIRES(this);
  // Before a send entry completes successfully: a staged READ or atomic
  // answer is copied into the device memory it was for. False when that
  // failed (the QP is then in ERROR, the entry completed with the error).
  bool settle_locked(const SendEntry& entry) RDMX_REQUIRES(this);
  // Whether `entry`, the next request the transport would send, may go now.
  // One whose device memory waits for room in the staging budget is staged
  // here once there is room; false until then, and the transport sends
  // nothing behind it. False too when its buffers fail the check made then
  // (the QP is in ERROR).
  bool ready_to_send_locked(SendEntry& entry) RDMX_REQUIRES(this);
  // The send-queue entry with `msn` among the first `within`, else null.
  SendEntry* entry_for_msn_locked(std::uint32_t msn, std::size_t within) RDMX_REQUIRES(this);
  // Starts the RNR clock of `entry`.
  void note_rnr_locked(SendEntry& entry, Clock::time_point now) RDMX_REQUIRES(this);
  bool push_send_completion_locked(const SendEntry& entry, WcStatus status) RDMX_REQUIRES(this);
  bool push_send_completion_locked(std::uint64_t wr_id, Opcode opcode, std::uint64_t total, WcStatus status)
      RDMX_REQUIRES(this);
  bool push_recv_completion_locked(const RecvEntry& entry, WcStatus status, WcOpcode opcode, std::uint32_t byte_len,
                                   bool with_imm, std::uint32_t imm) RDMX_REQUIRES(this);
  // In a callback run at once under the caller's state lock (as
  // MemoryRegistry::with_access runs it): the analysis checks a lambda apart
  // from the function that holds the lock.
  void held_by_caller() const RDMX_ASSERT_CAPABILITY(this) {}
  // Whether a pending connection's HELLO comes from the peer connect() named.
  bool from_peer_locked(const PendingConnection& p) const RDMX_REQUIRES(this) {
    return p.ids.source_qpn == ids_.target_qpn && p.ids.source_nonce == ids_.target_nonce;
  }
  ErrorContext context_locked(const std::string& op) const RDMX_REQUIRES(this);
  // For the checks made before the lock is taken (takes it).
  static ErrorContext context_of(const void* qp, const std::string& op);
  std::string describe_peer() const RDMX_REQUIRES(this) { return peer_text_.empty() ? "the peer" : peer_text_; }
  // post_send's check of a send entry's local SGEs: `memory` is filled for
  // those in device memory. False when one fails (the QP is then in ERROR).
  bool check_send_sges_locked(const SendEntry& entry, std::array<RegionMemory, kSoftMaxSge>& memory,
                              bool& device_memory) RDMX_REQUIRES(this);
  // Copies the entry's device memory to a staging buffer; false when that
  // failed (the QP is then in ERROR).
  bool stage_send_locked(SendEntry& entry, const std::array<RegionMemory, kSoftMaxSge>& memory) RDMX_REQUIRES(this);

  QpHolds holds_;  // first: the device, PD and CQs outlive everything below
  RegistryProtectionDomain& pd_;
  CompletionRing& send_cq_;
  CompletionRing& recv_cq_;
  const QpCaps caps_;
  const std::uint32_t qpn_;
  const char* const provider_;
  const std::uint64_t max_message_;
  SoftRcDevice& soft_device_;
  DeviceLock& device_lock_;  // soft_device_'s

  std::atomic<QpState> state_{QpState::Reset};
  std::string error_reason_ RDMX_GUARDED_BY(this);
  bool connect_requested_ RDMX_GUARDED_BY(this) = false;
  ConnectionIds ids_ RDMX_GUARDED_BY(this);  // as this QP's HELLO states them (set by begin_connect_locked)
  bool initiator_ RDMX_GUARDED_BY(this) = false;
  int peer_rank_ RDMX_GUARDED_BY(this) = -1;
  std::string peer_text_ RDMX_GUARDED_BY(this);
  std::chrono::milliseconds rnr_timeout_ RDMX_GUARDED_BY(this){};
  // A peer can try to connect once it has our address, before our connect():
  // descriptor shortages since this count for the connection (connect timeouts).
  const Clock::time_point created_at_ = Clock::now();
  Clock::time_point connect_deadline_ RDMX_GUARDED_BY(this){};
  Clock::time_point retry_connect_at_ RDMX_GUARDED_BY(this){};

  // The region of the last local key checked (posting from one buffer again
  // and again is the common case: the cache answers without the registry's lock).
  CachedKey local_key_;

  // Requester.
  WorkRing<SendEntry> sq_ RDMX_GUARDED_BY(this);
  std::uint32_t next_msn_ RDMX_GUARDED_BY(this) = 0;   // MSN of the next posted WR
  std::uint32_t acked_msn_ RDMX_GUARDED_BY(this) = 0;  // every MSN before this is acknowledged
  // Responder.
  WorkRing<RecvEntry> rq_ RDMX_GUARDED_BY(this);
  // Host buffers for requests whose local buffers are device memory.
  Staging staging_ RDMX_GUARDED_BY(this){pd_};
  std::size_t awaiting_staging_ RDMX_GUARDED_BY(this) = 0;  // send entries waiting for room to be staged
};

}  // namespace rdmx::core
