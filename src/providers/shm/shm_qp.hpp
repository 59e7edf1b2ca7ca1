// SPDX-License-Identifier: MIT
// An RC queue pair of the shm provider: two rings in a segment shared with
// the peer process, plus a Unix socket that carried the segment and now
// carries wake-ups and, by closing, the news that the peer is gone.
//
// The requester puts each work request into its outbound ring in MSN order:
// small payloads inline, large ones as a list of its own buffers. The
// responder executes requests in order under its own region table: it copies
// inline bytes, or pulls/pushes large ones with one process_vm_readv/writev
// between the two processes' buffers, answers READ and atomics in its own
// outbound ring, and publishes how far it has executed (the cumulative ACK).
// A SEND without a receive stays in the ring (RNR) until one is posted or the
// requester's RNR timer expires; only the requests behind it wait, answers to
// our own requests behind it are handled meanwhile. A refused request is
// NAKed and, as in IB, both QPs go to ERROR.
#pragma once

#include <sys/uio.h>

#include <array>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/completion_queue.hpp"
#include "core/memory_registry.hpp"
#include "providers/shm/address.hpp"
#include "providers/shm/ring.hpp"
#include "providers/shm/shm_device.hpp"

namespace rdmx::shm {

constexpr std::uint32_t kMaxSge = 16;
constexpr std::uint64_t kMaxMessage = 1ull << 31;

class ShmQp final : public QueuePair {
 public:
  ShmQp(ShmDevice& device, core::RegistryProtectionDomain& pd, core::CompletionRing& send_cq,
        core::CompletionRing& recv_cq, const QpCaps& caps);
  ~ShmQp() override;

  std::uint32_t qp_num() const noexcept override { return qpn_; }
  QpState state() const noexcept override { return state_.load(std::memory_order_acquire); }
  QpCaps caps() const noexcept override { return caps_; }
  std::string provider() const override { return "shm"; }
  std::string error_reason() const override;
  QpAddress local_address() const override;
  void init() override;
  void connect(const QpAddress& remote, const ConnectOptions& options) override;
  void set_error(const std::string& reason) override;
  void post_send(const SendWr& wr) override;
  void post_recv(const RecvWr& wr) override;

  // ---- engine side, device lock held ----
  // Consumes the inbound ring, completes acknowledged work, fills the
  // outbound ring. Returns the number of things done.
  std::size_t poll_locked();
  bool on_socket_locked(std::uint32_t events);
  // Returns true while the QP has timers that need scanning soon.
  bool on_timer_locked(core::Clock::time_point now);
  bool has_input_locked() const;
  // Publishes how far we executed the peer's requests (and our ring head):
  // at once when `force` or a request asked for it, else in batches.
  void publish_acks_locked(bool force);
  void set_sleeping_locked(bool sleeping);
  // Tells lock-free progress() calls where our next inbound record appears
  // and whether we have other work that needs a pass.
  void update_probe_locked();
  enum class Offer { Taken, NotYet, Refused };
  Offer offer_locked(const ShmDevice::PendingHello& hello);

 private:
  struct SendEntry {
    std::uint64_t wr_id;
    Opcode opcode;
    bool signaled;
    std::uint32_t imm;
    std::uint64_t remote_addr;
    std::uint32_t rkey;
    std::uint64_t compare_add;
    std::uint64_t swap;
    std::array<Sge, kMaxSge> sges;
    std::uint32_t num_sge;
    std::uint64_t total;
    std::uint32_t msn;
    bool response_done;  // READ / atomic: the answer has arrived
    bool ack_requested;  // the record asked the responder to publish `executed` at once
    bool rnr_seen;
    core::Clock::time_point first_rnr;
  };
  struct RecvEntry {
    std::uint64_t wr_id;
    std::array<Sge, kMaxSge> sges;
    std::uint32_t num_sge;
    std::uint64_t capacity;
  };
  enum class Step { Done, Stall, Failed };

  // Direct access to the peer's regions from allocate_memory().
  struct PeerRegion {
    std::uint32_t rkey;
    std::uint64_t base;
    std::uint64_t length;
    Access access;
    char* map;
    std::size_t map_length;
    core::SharedRegionState* state;
    std::atomic<std::uint32_t>* busy;  // our slot in `state`
  };
  // Copies a WRITE or READ straight into or out of the peer's mapped region;
  // false when it cannot (no mapping, out of bounds, deregistered): the ring
  // path then carries it and the peer's region table answers.
  bool try_direct_locked(const SendWr& wr, std::uint64_t total);
  // The WR's local SGEs pass the region table (else the ordinary path fails it).
  bool direct_locals_ok_locked(const SendWr& wr);
  void offer_region_locked(std::uint32_t rkey, const core::MemoryRegistry::Verdict& verdict);
  void take_offer_locked(const ShareOffer& offer, int fd);
  void drop_peer_region_locked(std::size_t index);

  // Requester.
  void pump_locked();
  bool put_request_locked(SendEntry& e);
  void complete_acknowledged_locked();
  // Whether `executed` must be read now: a completion, free send-queue slots
  // or a running RNR clock wait for it.
  bool ack_wanted_locked() const;
  // Removes the entry at the head of the send queue (completed or failed).
  void retire_head_locked();
  SendEntry* entry_for_msn_locked(std::uint32_t msn);
  // `offset`: where the record lies, in slots past the inbound ring's head.
  Step handle_response_locked(const Record* r, std::uint16_t slots, std::uint64_t offset);
  // The request at the inbound ring's head cannot run yet (no receive, or no
  // room for its answer): handles the answers to our own requests queued
  // behind it, which do not wait for it.
  void skim_locked(std::uint16_t held_slots);
  // Responder.
  Step execute_request_locked(const Record* r, std::uint16_t slots);
  Step deliver_locked(const Record* r, const RecvEntry* recv, std::uint64_t target_addr, bool to_recv);
  Step answer_read_locked(const Record* r);
  Step answer_atomic_locked(const Record* r);
  void nak_locked(std::uint32_t msn, WcStatus status, const std::string& why);
  bool push_control_locked(RecordType type, std::uint32_t msn, std::uint64_t arg0);
  void wake_peer_locked();
  // Connection.
  void start_connect_locked();
  void attach_segment_locked(void* base, bool initiator);
  void accept_locked(const ShmDevice::PendingHello& hello);
  void watch_socket_locked();
  void close_socket_locked();
  // Errors and completions.
  void fail_locked(const std::string& reason, WcStatus status, std::optional<std::uint32_t> failing_msn = {});
  // The peer went away: fail now if work is outstanding, else (as an IB QP,
  // which notices only when it next sends) at the next post.
  // `receives_too`: the peer process died, so posted receives can never
  // complete either (a peer QP that merely failed leaves them, as IB does).
  void peer_gone_locked(const std::string& reason, bool receives_too);
  void protocol_error_locked(const std::string& what);
  bool push_send_completion_locked(const SendEntry& e, WcStatus status);
  bool push_send_completion_locked(std::uint64_t wr_id, Opcode opcode, std::uint64_t total, WcStatus status);
  bool push_recv_completion_locked(const RecvEntry& e, WcStatus status, WcOpcode opcode, std::uint32_t byte_len,
                                   bool with_imm, std::uint32_t imm);
  ErrorContext context(const std::string& op) const;
  static ErrorContext context_of(const void* qp, const std::string& op);
  std::string describe_peer() const;

  ShmDevice& device_;
  ShmDevice::Probe* probe_ = nullptr;
  core::RegistryProtectionDomain& pd_;
  core::CompletionRing& send_cq_;
  core::CompletionRing& recv_cq_;
  QpCaps caps_;
  const std::uint32_t qpn_;
  const std::size_t eager_;
  // A word the peer reads with process_vm_readv to prove cross-memory attach works.
  std::uint64_t probe_value_;

  std::atomic<QpState> state_{QpState::Reset};
  std::string error_reason_;
  ShmAddress remote_{};
  bool connect_requested_ = false;
  bool initiator_ = false;
  int peer_rank_ = -1;
  std::string peer_text_;
  int peer_pid_ = -1;
  std::chrono::milliseconds rnr_timeout_{};
  core::Clock::time_point connect_deadline_{};
  core::Clock::time_point retry_connect_at_{};
  std::chrono::milliseconds retry_backoff_{1};

  // Connection.
  int socket_ = -1;
  int memfd_ = -1;  // initiator: the segment, until HELLO has carried it
  bool socket_connected_ = false;  // initiator: the Unix socket is connected and HELLO sent
  bool accepted_ = false;          // both: the handshake finished
  std::string peer_gone_;  // why the peer is gone, while no work has failed on it yet
  void* segment_ = nullptr;
  std::size_t segment_bytes_ = 0;
  RingProducer out_;
  RingConsumer in_;
  RingControl* out_control_ = nullptr;  // the peer consumes: its head, executed, sleeping
  RingControl* in_control_ = nullptr;   // we consume
  bool nak_pending_ = false;
  std::uint32_t nak_msn_ = 0;
  WcStatus nak_status_ = WcStatus::RemOpErr;

  // Requester.
  std::vector<SendEntry> sq_;
  std::size_t sq_head_ = 0;
  std::size_t sq_count_ = 0;
  std::size_t sq_sent_ = 0;  // entries (from the head) already in the ring
  std::uint32_t next_msn_ = 0;
  std::uint32_t acked_msn_ = 0;  // every request before this is known executed
  std::uint32_t ack_requests_outstanding_ = 0;
  // Sent entries whose RNR clock runs (rnr_seen): while there are any, every
  // pass reads `executed`, so a SEND that got its receive completes (and its
  // clock stops) as soon as the responder says so.
  std::uint32_t rnr_outstanding_ = 0;

  // Responder.
  std::vector<RecvEntry> rq_;
  std::size_t rq_head_ = 0;
  std::size_t rq_count_ = 0;
  std::uint32_t expected_msn_ = 0;
  std::uint32_t published_msn_ = 0;
  bool ack_now_ = false;  // an executed request asked for `executed` at once

  // Region checks on the message path skip the registry's lock while no
  // region was deregistered (the device lock is the registry's access lock).
  core::CachedKey local_key_;
  core::CachedKey remote_key_;

  std::vector<PeerRegion> peer_regions_;   // the peer's regions we mapped
  std::vector<std::uint32_t> offered_;     // our rkeys whose memory we offered the peer
  bool rnr_nak_sent_ = false;  // for the request at the ring's head
  // Inbound ring position up to which skim_locked() has handled the answers
  // (requests there still wait their turn).
  std::uint64_t skimmed_to_ = 0;
};

}  // namespace rdmx::shm
