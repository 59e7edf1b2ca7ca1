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
//
// Where it lives: the connection in shm_qp.cpp, the pass over the rings in
// qp_pass.cpp, the requester in qp_requester.cpp, the responder in
// qp_responder.cpp, direct copies into the peer's mapped regions in
// qp_direct.cpp; queues, completions and errors in core::SoftRcQp.
#pragma once

#include <sys/uio.h>

#include <array>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/completion_queue.hpp"
#include "core/memory_registry.hpp"
#include "core/soft_rc/qp.hpp"
#include "providers/shm/address.hpp"
#include "providers/shm/ring.hpp"
#include "providers/shm/shm_device.hpp"

namespace rdmx::shm {

constexpr std::uint32_t kMaxSge = core::kSoftMaxSge;
constexpr std::uint64_t kMaxMessage = 1ull << 31;
// Ring slots per direction: 4096 x 64 B = 256 KiB, room for 16 eager messages of 16 KiB.
constexpr std::uint32_t kRingSlots = 4096;

// The local pieces [0, length) of an SGE list, as iovecs.
int sge_iovecs(const std::array<Sge, kMaxSge>& sges, std::uint32_t num, std::uint64_t length, iovec* out);

class ShmQp final : public core::SoftRcQp {
 public:
  ShmQp(ShmDevice& device, const core::QpParts& parts, const QpCaps& caps);
  ~ShmQp() override;

  QpAddress local_address() const override;
  void connect(const QpAddress& remote, const ConnectOptions& options) override;

  // ---- engine side, device lock held ----
  // Consumes the inbound ring, completes acknowledged work, fills the
  // outbound ring. Returns the number of things done.
  std::size_t poll_locked();
  bool on_socket_locked(std::uint32_t events) override;
  // Returns true while the QP has timers that need scanning soon.
  bool on_timer_locked(core::Clock::time_point now) override;
  bool has_input_locked() const;
  // Publishes how far we executed the peer's requests (and our ring head):
  // at once when `force` or a request asked for it, else in batches.
  void publish_acks_locked(bool force);
  void set_sleeping_locked(bool sleeping);
  // Tells lock-free progress() calls where our next inbound record appears
  // and whether we have other work that needs a pass.
  void update_probe_locked();
  core::Offer offer_locked(const core::PendingConnection& pending) override;

 private:
  using SendEntry = core::SendEntry;
  using RecvEntry = core::RecvEntry;
  enum class Step { Done, Stall, Failed };

  // The engine's hooks (core::SoftRcQp).
  void lock_state() override;
  void unlock_state() override;
  bool post_direct_locked(const SendWr& wr, std::uint64_t total) override;
  void send_queued_locked(SendEntry& entry) override;
  void recv_queued_locked() override;
  void error_entered_locked() override;
  bool peer_left_in_order_locked(const std::string& reason) const override;
  void retired_locked(const SendEntry& entry) override;

  // Direct access to the peer's regions from allocate_memory() (qp_direct.cpp).
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

  // Requester (qp_requester.cpp).
  void pump_locked();
  bool put_request_locked(SendEntry& e);
  void complete_acknowledged_locked();
  // Whether `executed` must be read now: a completion, free send-queue slots
  // or a running RNR clock wait for it.
  bool ack_wanted_locked() const;
  SendEntry* entry_for_msn_locked(std::uint32_t msn);
  // `offset`: where the record lies, in slots past the inbound ring's head.
  Step handle_response_locked(const Record* r, std::uint16_t slots, std::uint64_t offset);
  // Responder (qp_responder.cpp).
  Step execute_request_locked(const Record* r, std::uint16_t slots);
  Step deliver_locked(const Record* r, const RecvEntry* recv, std::uint64_t target_addr, bool to_recv);
  Step answer_read_locked(const Record* r);
  Step answer_atomic_locked(const Record* r);
  void nak_locked(std::uint32_t msn, WcStatus status, const std::string& why);
  bool push_control_locked(RecordType type, std::uint32_t msn, std::uint64_t arg0);
  // The pass (qp_pass.cpp).
  // The request at the inbound ring's head cannot run yet (no receive, or no
  // room for its answer): handles the answers to our own requests queued
  // behind it, which do not wait for it.
  void skim_locked(std::uint16_t held_slots);
  void wake_peer_locked();
  // Connection (shm_qp.cpp).
  void start_connect_locked();
  void attach_segment_locked(void* base, bool initiator);
  void accept_locked(const core::PendingConnection& pending);
  void watch_socket_locked();
  void close_socket_locked();
  // Errors.
  // The peer went away: fail now if work is outstanding, else (as an IB QP,
  // which notices only when it next sends) at the next post.
  // `receives_too`: the peer process died, so posted receives can never
  // complete either (a peer QP that merely failed leaves them, as IB does).
  void peer_gone_locked(const std::string& reason, bool receives_too);
  void protocol_error_locked(const std::string& what);
  ShmDevice& device_;
  ShmDevice::Probe* probe_ = nullptr;
  const std::size_t eager_;
  // A word the peer reads with process_vm_readv to prove cross-memory attach works.
  std::uint64_t probe_value_;

  ShmAddress remote_{};
  int peer_pid_ = -1;
  std::chrono::milliseconds retry_backoff_{1};

  // Connection.
  int socket_ = -1;
  int memfd_ = -1;                 // initiator: the segment, until HELLO has carried it
  bool socket_connected_ = false;  // initiator: the Unix socket is connected and HELLO sent
  bool accepted_ = false;          // both: the handshake finished
  std::string peer_gone_;          // why the peer is gone, while no work has failed on it yet
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
  std::size_t sq_sent_ = 0;  // entries (from the head) already in the ring
  std::uint32_t ack_requests_outstanding_ = 0;
  // Sent entries whose RNR clock runs (rnr_seen): while there are any, every
  // pass reads `executed`, so a SEND that got its receive completes (and its
  // clock stops) as soon as the responder says so.
  std::uint32_t rnr_outstanding_ = 0;

  // Responder.
  std::uint32_t expected_msn_ = 0;
  std::uint32_t published_msn_ = 0;
  bool ack_now_ = false;  // an executed request asked for `executed` at once

  // Region checks on the message path skip the registry's lock while no
  // region was deregistered (the device lock is the registry's access lock).
  core::CachedKey remote_key_;

  std::vector<PeerRegion> peer_regions_;  // the peer's regions we mapped
  std::vector<std::uint32_t> offered_;    // our rkeys whose memory we offered the peer
  bool rnr_nak_sent_ = false;             // for the request at the ring's head
  // Inbound ring position up to which skim_locked() has handled the answers
  // (requests there still wait their turn).
  std::uint64_t skimmed_to_ = 0;
};

// Refreshes the QP's probe when the locked section it guards ends.
struct ProbeRefresh {
  ShmQp* qp;
  ~ProbeRefresh() { qp->update_probe_locked(); }
};

}  // namespace rdmx::shm
