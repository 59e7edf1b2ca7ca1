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
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "core/completion_queue.hpp"
#include "core/memory_registry.hpp"
#include "core/soft_rc/connection.hpp"
#include "core/soft_rc/queues.hpp"
#include "core/wait.hpp"
#include "rdmx/verbs.hpp"

namespace rdmx::core {

class SoftRcQp : public QueuePair {
 public:
  std::uint32_t qp_num() const noexcept final { return qpn_; }
  QpState state() const noexcept final { return state_.load(std::memory_order_acquire); }
  QpCaps caps() const noexcept final { return caps_; }
  std::string provider() const final { return provider_; }
  std::string error_reason() const final;
  void init() final;
  void set_error(const std::string& reason) final;
  void post_send(const SendWr& wr) final;
  void post_recv(const RecvWr& wr) final;

  // ---- the device's calls, device lock held ----
  // Events on the QP's socket; true when anything was done.
  virtual bool on_socket_locked(std::uint32_t events) = 0;
  // True while the QP's timers need scanning soon.
  virtual bool on_timer_locked(Clock::time_point now) = 0;
  // A pending connection whose HELLO names this QP.
  virtual Offer offer_locked(const PendingConnection& pending) = 0;

 protected:
  // `caps`: as granted by the device (core::grant_qp_caps).
  SoftRcQp(const char* provider, std::uint32_t qpn, std::uint64_t max_message, RegistryProtectionDomain& pd,
           CompletionRing& send_cq, CompletionRing& recv_cq, const QpCaps& caps);

  // The lock that guards this QP's state: its own (tcp) or its device's (shm).
  virtual void lock_state() = 0;
  virtual void unlock_state() = 0;
  class StateGuard {
   public:
    explicit StateGuard(SoftRcQp& qp) : qp_(qp) { qp_.lock_state(); }
    ~StateGuard() { qp_.unlock_state(); }
    StateGuard(const StateGuard&) = delete;
    StateGuard& operator=(const StateGuard&) = delete;

   private:
    SoftRcQp& qp_;
  };

  // ---- hooks, state lock held ----
  // A WRITE or READ the transport can finish at once, without a queue entry
  // (the QP is in RTS); true when it did.
  virtual bool post_direct_locked(const SendWr& /*wr*/, std::uint64_t /*total*/) { return false; }
  // A send WR was queued, its local buffers checked: start it.
  virtual void send_queued_locked(SendEntry& entry) = 0;
  // A receive was queued.
  virtual void recv_queued_locked() {}
  // The QP entered ERROR and its send queue was flushed (its receive queue
  // is flushed next): stop the transport and tell the peer.
  virtual void error_entered_locked() = 0;
  // Whether the peer left in order (so the move to ERROR is logged as
  // information, not as a warning, when nothing was outstanding).
  virtual bool peer_left_in_order_locked(const std::string& reason) const = 0;
  // An entry left the send queue completed (not flushed).
  virtual void retired_locked(const SendEntry& /*entry*/) {}

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
                            const std::string& detail);
  // Moves to ERROR: the WR with `failing_msn` (default: the oldest) completes
  // with `status`, every other outstanding WR and receive with WR_FLUSH_ERR.
  void fail_locked(const std::string& reason, WcStatus status, std::optional<std::uint32_t> failing_msn = {});
  // Completes, oldest first, the first `sent` send-queue entries that are
  // done: acknowledged (before acked_msn_), or for READ and atomics answered.
  void complete_done_locked(std::size_t sent);
  // Removes the (completed) entry at the head of the send queue.
  void retire_head_locked();
  // The send-queue entry with `msn` among the first `within`, else null.
  SendEntry* entry_for_msn_locked(std::uint32_t msn, std::size_t within);
  // Starts the RNR clock of `entry`.
  void note_rnr_locked(SendEntry& entry, Clock::time_point now);
  bool push_send_completion_locked(const SendEntry& entry, WcStatus status);
  bool push_send_completion_locked(std::uint64_t wr_id, Opcode opcode, std::uint64_t total, WcStatus status);
  bool push_recv_completion_locked(const RecvEntry& entry, WcStatus status, WcOpcode opcode, std::uint32_t byte_len,
                                   bool with_imm, std::uint32_t imm);
  ErrorContext context(const std::string& op) const;
  static ErrorContext context_of(const void* qp, const std::string& op);
  std::string describe_peer() const { return peer_text_.empty() ? "the peer" : peer_text_; }

  RegistryProtectionDomain& pd_;
  CompletionRing& send_cq_;
  CompletionRing& recv_cq_;
  const QpCaps caps_;
  const std::uint32_t qpn_;
  const char* const provider_;
  const std::uint64_t max_message_;

  std::atomic<QpState> state_{QpState::Reset};
  std::string error_reason_;
  bool connect_requested_ = false;
  bool initiator_ = false;
  int peer_rank_ = -1;
  std::string peer_text_;
  std::chrono::milliseconds rnr_timeout_{};
  Clock::time_point connect_deadline_{};
  Clock::time_point retry_connect_at_{};

  // The region of the last local key checked (posting from one buffer again
  // and again is the common case: the cache answers without the registry's lock).
  CachedKey local_key_;

  // Requester.
  WorkRing<SendEntry> sq_;
  std::uint32_t next_msn_ = 0;   // MSN of the next posted WR
  std::uint32_t acked_msn_ = 0;  // every MSN before this is acknowledged
  // Responder.
  WorkRing<RecvEntry> rq_;
};

}  // namespace rdmx::core
