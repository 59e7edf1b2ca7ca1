// SPDX-License-Identifier: MIT
// A reliable-connected QP on an RDMA device. The hardware does the work
// (transfers, key checks, retries, RNR, ordering); this class translates
// rdmx work requests and completions, and keeps what the hardware does not:
//   - rdmx QP numbers and wr_ids (hardware wr_ids are sequence numbers, so a
//     completion finds its request, and unsignaled ones retire in order);
//   - selective signalling: the hardware is asked for a completion at least
//     every half queue, so unsignaled work frees its slots; those
//     completions are not shown;
//   - inline sends for small payloads whose key the registry confirms (the
//     hardware does not check the lkey of inline data, IB semantics do);
//   - work posted in ERROR completes with WR_FLUSH_ERR after the work the
//     hardware is still flushing, in posting order.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "driver/completion_queue.hpp"
#include "driver/device_resources.hpp"
#include "driver/memory_registry.hpp"
#include "providers/verbs/address.hpp"
#include "rdmx/verbs.hpp"
#include "services/mutex.hpp"

namespace rdmx::verbs {

class VerbsDevice;

class VerbsQp final : public QueuePair {
 public:
  // `parts`: its PD and CQs, which it holds while it lives.
  VerbsQp(VerbsDevice& device, const core::QpParts& parts, const QpCaps& caps);
  ~VerbsQp() override;

  std::uint32_t qp_num() const noexcept override { return qpn_; }
  QpState state() const noexcept override { return state_.load(std::memory_order_acquire); }
  QpCaps caps() const noexcept override { return caps_; }
  DeviceCaps device_caps() const override;
  std::string provider() const override { return "verbs"; }
  std::string error_reason() const override;
  QpAddress local_address() const override;
  void init() override;
  void connect(const QpAddress& remote, const ConnectOptions& options) override;
  void set_error(const std::string& reason) override;
  void post_send(const SendWr& wr) override;
  PostResult try_post_send(const SendWr& wr) override;
  // One doorbell for the whole list (up to 16 hardware WRs per ibv_post_send).
  void post_send_batch(std::span<const SendWr> wrs) override;
  void post_recv(const RecvWr& wr) override;

  // ---- device side, under the device's lock ----
  // Asks the hardware for an event at the next completion.
  void arm();
  // Moves hardware completions into the rdmx CQs; returns how many.
  std::size_t drain();

  // The largest inline payload `device` accepts (0: none), from a throwaway QP.
  static std::uint32_t probe_inline_limit(VerbsDevice& device);

 private:
  // Marks a receive's wr_id on the hardware queue (the rest is its sequence number).
  static constexpr std::uint64_t kRecvBit = 1ull << 63;

  struct SendSlot {
    std::uint64_t wr_id = 0;
    std::uint64_t last_seq = 0;  // the last hardware WR of this rdmx WR (split RDMA: several)
    std::uint32_t bytes = 0;
    WcOpcode opcode = WcOpcode::Send;
    bool signaled = true;   // show a successful completion (the last piece of a signaled WR)
    bool bad_lkey = false;  // the registry refused a local key at post time
  };
  struct RecvSlot {
    std::uint64_t wr_id = 0;
    bool bad_lkey = false;
  };
  struct Doorbell;
  void post_list(std::span<const SendWr> wrs, bool batch);
  // Adds `wr`'s hardware WRs to `db` (ringing it when full); posting lock held.
  // With `full` given, a full send queue sets it and appends nothing
  // instead of throwing QueueFull.
  void append(const SendWr& wr, Doorbell& db, bool* full = nullptr) RDMX_REQUIRES(send_mutex_);
  void ring(Doorbell& db, Opcode opcode) RDMX_REQUIRES(send_mutex_);
  static ErrorContext context_of(const void* qp, const std::string& op);
  ErrorContext context(const std::string& op) const;
  void modify(ibv_qp_attr& attr, int mask, const char* step, const std::string& peer) RDMX_REQUIRES(control_mutex_);
  void enter_error(const std::string& reason);  // records why; state ERROR
  void handle(const ibv_wc& wc);
  void release_held_flushes();
  bool inline_ok(const SendWr& wr, std::uint64_t bytes, bool lkeys_ok);
  // Whether every non-empty SGE's lkey covers it in this QP's PD (as the
  // hardware will decide; used to report IB's status where a driver differs).
  bool lkeys_valid(std::span<const Sge> sges, Access need, core::CachedKey& cache);
  // Work posted in ERROR: a WR_FLUSH_ERR completion, released after the
  // hardware's flushes of earlier work (release_held_flushes).
  void hold_flush(std::uint64_t wr_id, WcOpcode opcode);
  WcStatus normalized(WcStatus status, bool recv, bool bad_lkey, WcOpcode opcode) const;

  core::QpHolds holds_;  // first: the device, PD and CQs outlive everything below
  VerbsDevice& device_;
  core::RegistryProtectionDomain& pd_;
  core::CompletionRing& send_cq_;
  core::CompletionRing& recv_cq_;
  QpCaps caps_;
  std::uint32_t qpn_;
  std::uint32_t psn_;
  std::uint32_t signal_interval_;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;

  std::atomic<QpState> state_{QpState::Reset};
  mutable core::Mutex control_mutex_;  // state changes, error reason, peer
  std::string error_reason_ RDMX_GUARDED_BY(control_mutex_);
  std::string peer_ RDMX_GUARDED_BY(control_mutex_);  // for errors: "rank 3 (GID ... QP 0x12)"
  int peer_rank_ RDMX_GUARDED_BY(control_mutex_) = -1;

  core::Mutex send_mutex_;
  std::vector<SendSlot> send_slots_;
  std::atomic<std::uint64_t> send_next_{0};  // sequence of the next send
  std::atomic<std::uint64_t> send_done_{0};  // every send before it has completed
  std::uint32_t since_signal_ = 0;
  std::uint64_t suppress_through_ = 0;  // drain: later pieces of a split WR that already failed (seq + 1)
  core::CachedKey send_key_cache_ RDMX_GUARDED_BY(send_mutex_);
  bool rxe_quirks_ = false;    // see normalized()
  std::uint64_t chunk_limit_;  // the port's largest message: longer RDMA WRITE/READ go in pieces

  core::Mutex recv_mutex_;
  std::vector<RecvSlot> recv_slots_;
  core::CachedKey recv_key_cache_ RDMX_GUARDED_BY(recv_mutex_);
  std::atomic<std::uint64_t> recv_next_{0};
  std::atomic<std::uint64_t> recv_done_{0};

  core::Mutex held_mutex_;  // work posted in ERROR, waiting for the hardware's flushes
  std::vector<WorkCompletion> held_sends_ RDMX_GUARDED_BY(held_mutex_);
  std::vector<WorkCompletion> held_recvs_ RDMX_GUARDED_BY(held_mutex_);
};

}  // namespace rdmx::verbs
