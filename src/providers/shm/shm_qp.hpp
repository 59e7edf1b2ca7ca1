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

#include "driver/completion_queue.hpp"
#include "driver/memory_registry.hpp"
#include "providers/shm/address.hpp"
#include "providers/shm/ring.hpp"
#include "providers/shm/shm_device.hpp"
#include "providers/soft_rc/qp.hpp"
#include "services/cuda/pinned.hpp"
#include "services/thread_annotations.hpp"

namespace rdmx::shm {

constexpr std::uint32_t kMaxSge = core::kSoftMaxSge;
constexpr std::uint64_t kMaxMessage = 1ull << 31;

class ShmOfferLink;  // offer_link.hpp

// The local pieces [0, length) of an SGE list, as iovecs.
int sge_iovecs(const std::array<Sge, kMaxSge>& sges, std::uint32_t num, std::uint64_t length, iovec* out);

class ShmQp final : public core::SoftRcQp {
 public:
  ShmQp(ShmDevice& device, const core::QpParts& parts, const QpCaps& caps);
  ~ShmQp() override;

  void connect(const QpAddress& remote, const ConnectOptions& options) override;

  // ---- engine side, device lock held ----
  // The state lock of a shm QP is its device's lock (lock_state()): tells
  // the analysis that `held`, the device lock the caller holds, guards this
  // QP's state (checked in debug builds).
  void state_held_by_device([[maybe_unused]] const core::DeviceLock& held) const RDMX_REQUIRES(held)
      RDMX_ASSERT_CAPABILITY(this) {
    assert(&held == &device_lock_);
  }
  // Consumes the inbound ring, completes acknowledged work, fills the
  // outbound ring. Returns the number of things done.
  std::size_t poll_locked() RDMX_REQUIRES(this);
  bool on_socket_locked(std::uint32_t events) override RDMX_REQUIRES(device_lock_);
  // Returns true while the QP has timers that need scanning soon.
  bool on_timer_locked(core::Clock::time_point now) override RDMX_REQUIRES(device_lock_);
  bool has_input_locked() const RDMX_REQUIRES(this);
  // Publishes how far we executed the peer's requests (and our ring head):
  // at once when `force` or a request asked for it, else in batches.
  void publish_acks_locked(bool force) RDMX_REQUIRES(this);
  void set_sleeping_locked(bool sleeping) RDMX_REQUIRES(this);
  // Tells lock-free progress() calls where our next inbound record appears
  // and whether we have other work that needs a pass.
  void update_probe_locked() RDMX_REQUIRES(this);
  core::Offer offer_locked(const core::PendingConnection& pending) override RDMX_REQUIRES(device_lock_);
  // Deregistration of our region `rkey`, offered to the peer: asks it to
  // close its import (ShmOfferLink). False when the ring has no room yet.
  bool ask_peer_to_close_locked(std::uint32_t rkey) RDMX_REQUIRES(device_lock_);

 private:
  using SendEntry = core::SendEntry;
  using RecvEntry = core::RecvEntry;
  // Dropped: the peer's QP failed during the request's copy, which then
  // delivers nothing (a Done for the ring, with no completion).
  enum class Step { Done, Stall, Failed, Dropped };

  // The engine's hooks (core::SoftRcQp).
  void lock_state() override RDMX_ACQUIRE();
  void unlock_state() override RDMX_RELEASE();
  // ... and the other way: the device's lock is held while the state is.
  void device_held_by_state() const RDMX_REQUIRES(this) RDMX_ASSERT_CAPABILITY(device_.lock()) {}
  bool post_direct_locked(const SendWr& wr, std::uint64_t total) override RDMX_REQUIRES(this);
  void send_queued_locked(SendEntry& entry) override RDMX_REQUIRES(this);
  void recv_queued_locked() override RDMX_REQUIRES(this);
  void stop_peer_access_locked() override RDMX_REQUIRES(this);
  void error_entered_locked() override RDMX_REQUIRES(this);
  bool peer_left_in_order_locked(const std::string& reason) const override RDMX_REQUIRES(this);
  void retired_locked(const SendEntry& entry) override RDMX_REQUIRES(this);

  // Direct access to the peer's regions from allocate_memory() and to its
  // shared device memory (qp_direct.cpp).
  struct PeerRegion {
    std::uint32_t rkey;
    std::uint64_t base;
    std::uint64_t length;
    Access access;
    // The mapping: the region's data then its state page, or (device memory
    // and the peer's heap) the state page only.
    char* map;
    std::size_t map_length;
    core::SharedRegionState* state;
    std::atomic<std::uint32_t>* busy;     // our slot in `state`
    std::atomic<std::uint32_t>* holding;  // set while we hold a legacy-handle import of it
    // Device memory: the peer's allocation opened here, and where the region starts in this process.
    std::shared_ptr<core::cuda::ImportedMemory> imported;
    char* device_data = nullptr;
    bool heap = false;  // the peer's own memory: copied with process_vm_writev/readv
  };
  // Copies a WRITE or READ straight into or out of the peer's mapped region;
  // false when it cannot (no mapping, out of bounds, deregistered): the ring
  // path then carries it and the peer's region table answers.
  bool try_direct_locked(const SendWr& wr, std::uint64_t total) RDMX_REQUIRES(this);
  // The WR's local SGEs pass the region table (else the ordinary path fails
  // it); sets direct_local_gpu_ when one of them is device memory.
  bool direct_locals_ok_locked(const SendWr& wr) RDMX_REQUIRES(this);
  bool copy_through_gpu_locked(const PeerRegion& r, const SendWr& wr, std::uint64_t total) RDMX_REQUIRES(this);
  bool copy_across_processes_locked(const SendWr& wr, std::uint64_t total) RDMX_REQUIRES(this);
  void offer_region_locked(std::uint32_t rkey, const core::MemoryRegistry::Verdict& verdict) RDMX_REQUIRES(this);
  // `cuda_fd`: a device region's exported allocation (-1 otherwise).
  void take_offer_locked(const ShareOffer& offer, int fd, int cuda_fd) RDMX_REQUIRES(this);
  // Drops the mapped region's mapping and import; its `holding` word is cleared after the import closes.
  void drop_peer_region_locked(std::size_t index) RDMX_REQUIRES(this);
  void drop_peer_regions_locked() RDMX_REQUIRES(this);
  // The peer deregisters `rkey` and waits for us to close our import of it.
  void revoke_peer_region_locked(std::uint32_t rkey) RDMX_REQUIRES(this);

  // Requester (qp_requester.cpp).
  void pump_locked() RDMX_REQUIRES(this);
  bool put_request_locked(SendEntry& e) RDMX_REQUIRES(this);
  void complete_acknowledged_locked() RDMX_REQUIRES(this);
  // Whether `executed` must be read now: a completion, free send-queue slots
  // or a running RNR clock wait for it.
  bool ack_wanted_locked() const RDMX_REQUIRES(this);
  SendEntry* entry_for_msn_locked(std::uint32_t msn) RDMX_REQUIRES(this);
  // `offset`: where the record lies, in slots past the inbound ring's head.
  Step handle_response_locked(const Record* r, std::uint16_t slots, std::uint64_t offset) RDMX_REQUIRES(this);
  // Responder (qp_responder.cpp).
  Step execute_request_locked(const Record* r, std::uint16_t slots) RDMX_REQUIRES(this);
  // The peer's QP failed (RingControl::closed): its requests are dropped
  // unexecuted, as are those of a peer whose packets stop arriving.
  Step drop_request_of_closed_peer_locked() RDMX_REQUIRES(this);
  // The peer's QP entered ERROR (RingControl::closed).
  bool producer_closed() const RDMX_REQUIRES(this) { return in_control_->closed.load(std::memory_order_seq_cst) != 0; }
  Step deliver_locked(const Record* r, const RecvEntry* recv, std::uint64_t target_addr, bool to_recv)
      RDMX_REQUIRES(this);
  Step answer_read_locked(const Record* r) RDMX_REQUIRES(this);
  Step answer_atomic_locked(const Record* r) RDMX_REQUIRES(this);
  void nak_locked(std::uint32_t msn, WcStatus status, const std::string& why) RDMX_REQUIRES(this);
  bool push_control_locked(RecordType type, std::uint32_t msn, std::uint64_t arg0) RDMX_REQUIRES(this);
  // The pass (qp_pass.cpp).
  // The request at the inbound ring's head cannot run yet (no receive, or no
  // room for its answer): handles the answers to our own requests queued
  // behind it, which do not wait for it.
  void skim_locked(std::uint16_t held_slots) RDMX_REQUIRES(this);
  void wake_peer_locked() RDMX_REQUIRES(this);
  // Connection (shm_qp.cpp).
  void start_connect_locked() RDMX_REQUIRES(this);
  void attach_segment_locked(void* base, bool initiator) RDMX_REQUIRES(this);
  void accept_locked(const core::PendingConnection& pending) RDMX_REQUIRES(this);
  // The initiator reads the peer's ACCEPT (or its refusal); false when it has not come yet.
  bool take_accept_locked() RDMX_REQUIRES(this);
  // The peer closed the handshake without a reply (its device had too many
  // connections waiting): connect again after the backoff.
  void retry_after_unanswered_locked() RDMX_REQUIRES(this);
  void watch_socket_locked() RDMX_REQUIRES(this);
  void close_socket_locked() RDMX_REQUIRES(this);
  // Errors.
  // The peer went away: fail now if work is outstanding, else (as an IB QP,
  // which notices only when it next sends) at the next post.
  // `receives_too`: the peer process died, so posted receives can never
  // complete either (a peer QP that merely failed leaves them, as IB does).
  void peer_gone_locked(const std::string& reason, bool receives_too) RDMX_REQUIRES(this);
  void protocol_error_locked(const std::string& what) RDMX_REQUIRES(this);
  ShmDevice& device_;
  ShmDevice::Probe* probe_ RDMX_GUARDED_BY(this) = nullptr;
  const std::size_t eager_ RDMX_GUARDED_BY(this);
  // A word the peer reads with process_vm_readv to prove cross-memory attach works.
  std::uint64_t probe_value_ RDMX_GUARDED_BY(this);

  ShmAddress remote_ RDMX_GUARDED_BY(this){};
  int peer_pid_ RDMX_GUARDED_BY(this) = -1;
  std::chrono::milliseconds retry_backoff_ RDMX_GUARDED_BY(this){1};

  // Connection.
  int socket_ RDMX_GUARDED_BY(this) = -1;
  int memfd_ RDMX_GUARDED_BY(this) = -1;                 // initiator: the segment, until the peer accepted it
  int unanswered_ RDMX_GUARDED_BY(this) = 0;             // initiator: handshakes the peer closed without a reply
  bool socket_connected_ RDMX_GUARDED_BY(this) = false;  // initiator: the Unix socket is connected and HELLO sent
  bool accepted_ RDMX_GUARDED_BY(this) = false;          // both: the handshake finished
  std::string peer_gone_ RDMX_GUARDED_BY(this);          // why the peer is gone, while no work has failed on it yet
  void* segment_ RDMX_GUARDED_BY(this) = nullptr;
  std::size_t segment_bytes_ RDMX_GUARDED_BY(this) = 0;
  RingProducer out_ RDMX_GUARDED_BY(this);
  RingConsumer in_ RDMX_GUARDED_BY(this);
  RingControl* out_control_ RDMX_GUARDED_BY(this) = nullptr;  // the peer consumes: its head, executed, sleeping
  RingControl* in_control_ RDMX_GUARDED_BY(this) = nullptr;   // we consume
  bool nak_pending_ RDMX_GUARDED_BY(this) = false;
  std::uint32_t nak_msn_ RDMX_GUARDED_BY(this) = 0;
  WcStatus nak_status_ RDMX_GUARDED_BY(this) = WcStatus::RemOpErr;

  // Requester.
  std::size_t sq_sent_ RDMX_GUARDED_BY(this) = 0;  // entries (from the head) already in the ring
  std::uint32_t ack_requests_outstanding_ RDMX_GUARDED_BY(this) = 0;
  // Sent entries whose RNR clock runs (rnr_seen): while there are any, every
  // pass reads `executed`, so a SEND that got its receive completes (and its
  // clock stops) as soon as the responder says so.
  std::uint32_t rnr_outstanding_ RDMX_GUARDED_BY(this) = 0;

  // Responder.
  std::uint32_t expected_msn_ RDMX_GUARDED_BY(this) = 0;
  std::uint32_t published_msn_ RDMX_GUARDED_BY(this) = 0;
  bool ack_now_ RDMX_GUARDED_BY(this) = false;  // an executed request asked for `executed` at once

  // Region checks on the message path skip the registry's lock while no
  // region was deregistered (the device lock is the registry's access lock).
  core::CachedKey remote_key_ RDMX_GUARDED_BY(this);

  std::vector<PeerRegion> peer_regions_ RDMX_GUARDED_BY(this);  // the peer's regions we mapped
  int direct_local_gpu_ RDMX_GUARDED_BY(this) = -1;             // see direct_locals_ok_locked()
  // What a request between the peer's memory and our device memory is carried through, a piece at a time.
  core::cuda::PinnedBuffer device_piece_ RDMX_GUARDED_BY(this);
  std::vector<std::uint32_t> offered_ RDMX_GUARDED_BY(this);  // our rkeys whose memory we offered the peer
  // How deregistration of our legacy-handle device regions reaches the peer (made at the first such offer).
  std::shared_ptr<ShmOfferLink> offer_link_ RDMX_GUARDED_BY(this);
  bool rnr_nak_sent_ RDMX_GUARDED_BY(this) = false;  // for the request at the ring's head
  // Inbound ring position up to which skim_locked() has handled the answers
  // (requests there still wait their turn).
  std::uint64_t skimmed_to_ RDMX_GUARDED_BY(this) = 0;
};

// Refreshes the QP's probe when the locked section it guards ends. Made
// only where the state is held; the analysis cannot see through `qp`.
struct ProbeRefresh {
  ShmQp* qp;
  ~ProbeRefresh() RDMX_NO_THREAD_SAFETY_ANALYSIS { qp->update_probe_locked(); }
};

}  // namespace rdmx::shm
