// SPDX-License-Identifier: MIT
// Links: a communicator's connections to its peers, and the message protocol
// that the collective algorithms run over them, written against the public
// core API only (any provider; the device reports capabilities, it is never
// named).
//
// Protocol. Every rank allocates one region (ProtectionDomain::allocate_memory,
// so the shm provider copies into it one-sidedly) holding, for each peer:
//   - an inbox of `slots` slots of (a wire::kHeader-byte header + chunk + an
//     8-byte trailer) that the peer RDMA-WRITEs into, and one flag word per slot;
//   - a staging area of the same shape, the source of this rank's WRITEs of
//     headers (and of payloads that are copied rather than sent in place);
//   - a credit word the peer writes: how many of this rank's messages it has
//     consumed.
// A message is one WRITE of header + payload into the peer's next slot. Where
// the device places a WRITE's last word last (DeviceCaps::
// ordered_write_placement), that WRITE also carries the message number as its
// trailer, which the receiver polls; elsewhere a second WRITE puts the number
// into the slot's flag, and writes on one QP land in order. Either way a
// receiver that sees the number sees the message.
// A sender reuses a slot only when the receiver's credit says it consumed
// the message that was there; receivers return credit when half the slots
// are consumed, which is enough for a sender to never wait on a credit the
// receiver holds back (see return_credit()).
//
// Schedules. An algorithm describes one operation as lists of sends and
// receives (Schedule) and run() progresses them all at once: transfers to
// or from one peer go in list order, each split into chunk-sized messages;
// a receive may reduce what arrives with another buffer; a send or receive
// may wait for an earlier receive (whole, or byte by byte for pipelines).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "coll/combine.hpp"
#include "coll/gather_all.hpp"
#include "coll/op_desc.hpp"
#include "rdmx/bootstrap.hpp"
#include "rdmx/cost_model.hpp"
#include "rdmx/registration_cache.hpp"
#include "rdmx/verbs.hpp"
#include "services/cuda/memory.hpp"
#include "services/mutex.hpp"
#include "services/wait.hpp"

namespace rdmx::coll {

struct SendOp {
  int peer = -1;
  const void* src = nullptr;
  std::size_t bytes = 0;
  int after = -1;       // index of a RecvOp that must have completed first
  bool stream = false;  // with `after`: byte i may go once that receive has delivered byte i (same length)
  // The WRITE reads `src` in place instead of from a staged copy. Only when
  // nothing writes src until the peer has consumed the message.
  bool in_place = false;
  // Direct (zero-copy) send: the payload is written straight into the
  // receiver's buffer at `rtr_offset` past the address that the receiver's
  // ready-to-receive message (RecvOp `rtr`) announced; the slot message only
  // says how much landed. Needs in_place; the receiver's RecvOp is `direct`.
  int rtr = -1;
  std::size_t rtr_offset = 0;
  // A ready-to-receive message: announces this rank's buffer `src` of
  // `bytes` bytes (registered for remote writes) to the peer.
  bool announce = false;
};

struct RecvOp {
  int peer = -1;
  void* dst = nullptr;
  std::size_t bytes = 0;
  const void* reduce_with = nullptr;  // non-null: dst = reduce_with (op) incoming
  int after = -1;                     // index of a RecvOp that must have completed first
  bool stream = false;                // with `after`: byte i may arrive once that receive delivered byte i
  int after_send = -1;        // index of a staged SendOp reading dst: byte i is written once it has posted byte i
  bool finalize = false;      // these are final values: apply Combine's finalize (avg) per chunk
  bool direct = false;        // the sender writes the payload into dst itself (SendOp::rtr)
  bool announcement = false;  // receives a peer's ready-to-receive message (see SendOp::announce)
  // progress, kept by run()
  std::size_t done = 0;
  std::uint64_t remote_addr = 0;  // an announcement's content
  std::uint32_t remote_key = 0;
};

struct Schedule {
  std::vector<SendOp> sends;
  std::vector<RecvOp> recvs;
  void clear() {
    sends.clear();
    recvs.clear();
  }
};

struct LinksConfig {
  std::size_t chunk = 256 * 1024;       // payload bytes per slot (multiple of 64)
  std::uint32_t slots = 16;             // slots per peer and direction
  std::size_t stage_limit = 16 * 1024;  // payloads up to this are copied into staging even when in place is allowed
  bool yield_when_waiting = false;      // more local ranks than cores: give the core away while spinning
  std::chrono::microseconds spin{-1};   // how long a run's waits spin before sleeping (negative: RDMX_SPIN_US)
  std::vector<int> host_of;             // per rank, its host (empty: one host), for link_figures()
  GatherAll gather_all;                 // how the ranks exchange link figures
};

// What the providers carrying a communicator's links declare of them
// (DeviceCaps::latency_us, bandwidth_gbps), the least favourable over every
// rank's links of each kind; a kind no link has stays zero.
struct LinkFigures {
  LinkCost in_host;
  LinkCost between_hosts;
};

struct Layout;

class Links {
 public:
  // What a revoked communicator's Links give the shrunk one's (hand_over()):
  // the protection domain and CQs its QPs were made with, the QPs to the
  // survivors that still work, by rank there (null: none to keep), and the
  // registrations of the user's buffers, which stay valid in the same
  // protection domain. Links made from it take what they use; if their
  // communicator is not made after all (a survivor died meanwhile), the QPs
  // they did not use come back for the next attempt.
  struct Handover {
    std::shared_ptr<ProtectionDomain> pd;
    std::shared_ptr<CompletionQueue> send_cq;
    std::shared_ptr<CompletionQueue> recv_cq;
    std::vector<std::unique_ptr<QueuePair>> qps;
    std::unique_ptr<RegistrationCache> user_mrs;
    std::vector<int> survivors;    // of the attempt: survivors[new rank] = rank there
    std::uint16_t generation = 0;  // the next Links' (see make_wr_id), one per attempt
  };

  // Collective over the ranks: allocates and registers the region,
  // publishes its address through `store` under `tag`, connects the ring
  // neighbours and agrees on the link figures; every other pair connects
  // in the first run() that uses it (links_lazy.cpp). `store` must outlive
  // these Links. With `from`, a pair whose two ranks both kept their QP
  // reuses it. Until kept() is called, these Links give `from` back the QPs
  // they did not use when they go.
  Links(std::shared_ptr<Device> device, Store& store, int rank, int size, const std::string& tag,
        const LinksConfig& config, std::chrono::milliseconds timeout, Handover* from = nullptr);
  // Their communicator is made: the QPs taken from a Handover stay, and
  // its registrations become these Links' (peers learn keys within the
  // operation that uses them, so none knows a key of the old ones).
  void kept() noexcept {
    if (lent_from_ != nullptr && lent_from_->user_mrs) user_mrs_ = std::move(lent_from_->user_mrs);
    lent_from_ = nullptr;
  }
  // Says goodbye first, if say_goodbye() was not called.
  ~Links();
  Links(const Links&) = delete;
  Links& operator=(const Links&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  std::size_t chunk() const noexcept { return config_.chunk; }
  std::size_t stage_limit() const noexcept { return config_.stage_limit; }
  Device& device() noexcept { return *device_; }
  // What the named ranks published of themselves (their last collectives,
  // where they are), for stall reports and timeouts; a run that has waited
  // `stall_warn` (RDMX_STALL_WARN; 0: never) reports once.
  using StatusReader = std::function<std::string(const std::vector<int>& ranks)>;
  void set_status_reader(StatusReader reader, std::chrono::milliseconds stall_warn) {
    status_reader_ = std::move(reader);
    stall_warn_ = stall_warn;
  }
  std::shared_ptr<Device> device_shared() const { return device_; }
  ProtectionDomain& pd() noexcept { return *pd_; }
  // "" for a peer not connected (yet).
  std::string peer_provider(int peer) const;
  // How many peers this rank has connected to so far.
  int connected_peers() const noexcept;
  // Payload bytes this rank's collectives have sent to and received from
  // `peer` (what their schedules move, whatever the transport); any thread.
  struct PeerTraffic {
    std::uint64_t sent = 0;
    std::uint64_t received = 0;
  };
  PeerTraffic traffic(int peer) const noexcept;
  // Whether WRITEs to `peer` land in its registered memory as cheaply as in
  // its region (DeviceCaps::direct_registered_writes of the link's device).
  bool direct_writes(int peer) const;
  // Whether some rank of the communicator reaches a peer through a device
  // that reaches other hosts (DeviceCaps::remote_peers): its rounds then
  // cost a network's latency. The same answer on every rank.
  bool network() const noexcept { return any_network_; }
  // The same on every rank: exchanged with the region addresses.
  const LinkFigures& link_figures() const noexcept { return figures_; }

  // Runs `schedule` for the operation `desc` until every transfer is done.
  // `reduce` combines (dst, a, b, count) for receives with reduce_with.
  // Throws: Protocol (a peer's message does not match `desc`: names both
  // calls, and tells every peer), Timeout (names the ranks that have not
  // arrived), PeerFailure (QP error or a peer's abort notice), InvalidState
  // (this communicator was aborted).
  // `timeout` bounds the whole run (the clock is read only once it has to wait).
  void run(Schedule& schedule, const OpDesc& desc, const Combine& combine, std::chrono::milliseconds timeout);

  // Marks the start and end of an operation, for peers diagnosing a timeout.
  void enter(const OpDesc& desc) noexcept;
  void leave(const OpDesc& desc) noexcept;

  // Waits until every WRITE this rank posted has completed (before its
  // buffers are reused or the QPs destroyed). Bounded by `deadline`.
  // `skip`: per peer, nonzero for peers not to wait for (they stopped answering).
  void drain(core::Clock::time_point deadline, const std::vector<char>* skip = nullptr);

  // Makes every current and later run() fail with `reason` and tells the
  // peers. Safe from any thread: the WRs that tell them are posted by the
  // thread driving an operation when one is (it alone keeps the peers' WR
  // counts), else here.
  void abort(const std::string& reason);
  // Makes every current and later run() fail because rank `failed` of this
  // communicator failed (its membership found it): with PeerFailure naming
  // the failed ranks, not the InvalidState of an abort. Sends no notice:
  // every survivor's membership tells it. Safe from any thread.
  void revoke(const std::string& reason, int failed);
  // The error an operation `op` of an aborted communicator gives.
  Error aborted_error(const std::string& op) const;
  // Held by the thread that runs an operation, for its whole length.
  class Driving {
   public:
    explicit Driving(Links& links) RDMX_NO_THREAD_SAFETY_ANALYSIS : links_(links) { links_.drive_mutex_.lock(); }
    ~Driving() RDMX_NO_THREAD_SAFETY_ANALYSIS {
      links_.drive_mutex_.unlock();
      links_.send_pending_abort_notice();
    }
    Driving(const Driving&) = delete;
    Driving& operator=(const Driving&) = delete;

   private:
    Links& links_;
  };
  bool aborted() const noexcept { return aborted_.load(std::memory_order_acquire); }
  // A copy: the application's thread may abort while the worker reads it.
  std::string abort_reason() const;

  // Scratch memory, registered, at least `bytes` long, in host memory or,
  // given `device`, on its GPU; valid until the next call.
  void* scratch(std::size_t bytes, const DeviceOps* device = nullptr);
  // The GPU work of operations whose buffers are on GPU `gpu`, made on first use.
  DeviceOps& device_ops(int gpu);

  // Registers user memory through a RegistrationCache: kept between
  // operations (on verbs, while the memory stays mapped).
  std::uint32_t lkey_for(const void* addr, std::size_t bytes);
  // The same, registered for peers' RDMA WRITEs as well: returns the rkey
  // (device memory: registered until the operation ends).
  std::uint32_t rkey_for(void* addr, std::size_t bytes);

  // The first half of teardown: tells every peer this rank is leaving and
  // waits (briefly) for theirs. True when every peer said goodbye: each had
  // then read this rank's store keys (published_keys()) while connecting,
  // and none reads them again. The communicator is unusable afterwards.
  bool say_goodbye() noexcept;

  // After a revocation, gives the shrunk communicator (survivors[new rank]
  // = rank here) the connections to survivors that still work: first lets
  // this rank's WRITEs and READs to them land (by `deadline`), so that
  // none reaches a region freed later; a pair with work still in flight is
  // not kept. Closes every other QP. These Links send nothing afterwards
  // (no goodbye); their region stays registered until they are destroyed.
  // Called once: a communicator shrinks once (CommImpl::shrink()).
  std::unique_ptr<Handover> hand_over(const std::vector<int>& survivors, core::Clock::time_point deadline);
  // How many of this rank's connections came from a Handover.
  int kept_connections() const noexcept { return kept_connections_; }
  // The keys this rank wrote into the store while connecting.
  const std::vector<std::string>& published_keys() const noexcept { return published_keys_; }

  struct Control;  // defined in links.cpp; public for its layout

 private:
  struct Peer;
  struct RunScratch;
  class RunState;
  friend class RunState;

  void run_schedule(Schedule& schedule, const OpDesc& desc, const Combine& combine, std::chrono::milliseconds timeout);
  void settle() noexcept;
  // Connecting on first use (links_lazy.cpp).
  void publish_region();
  // Makes pair p's control words and slot flags in this rank's region
  // resident; its slots take pages as data passes through them, so a peer
  // of the small-message algorithms holds a page or two of its 2 x
  // RDMX_COLL_BUFFSIZE.
  void make_pair_resident(int p) noexcept;
  // Reads p's region address, then takes `qp` (connected to p) as its
  // link; on failure, `qp` is left where it was.
  void attach_peer(int p, std::unique_ptr<QueuePair>&& qp);
  // Connects to the `wanted` peers not connected yet, answering the ranks
  // that dial this one meanwhile; throws Timeout naming the peers whose
  // address did not come by `deadline`.
  void connect(const std::vector<int>& wanted, core::Clock::time_point deadline);
  // The ranks that asked this one to connect and are not connected.
  std::vector<int> read_dials();
  // Connects the ranks that dialed this one (a waiting run calls it).
  void answer_dials();
  // Adds the dial entries not read to published_keys(), for removal.
  void forget_dials() noexcept;
  // connect() for every peer `schedule` uses; failures name `desc`.
  void connect_schedule(const Schedule& schedule, const OpDesc& desc, std::chrono::milliseconds timeout);
  void agree_on_figures();
  Store* store_ = nullptr;
  std::string tag_;
  std::int64_t dials_read_ = 0;  // dials of this rank read from the store
  void post(int peer, const SendWr& wr);
  // `signal`: this WRITE's completion is wanted (drain() then covers it).
  void write_to_peer(int p, const void* local, std::uint32_t length, std::size_t remote_offset, bool signal = false);
  bool live(int p) const;  // another rank whose QP is connected and not in ERROR
  // How many of this rank's messages peer p has consumed (written by p).
  const std::atomic<std::uint64_t>& credit_word(int p) const;
  void poll_send_cq();
  void return_credit(Peer& peer, bool force);
  [[noreturn]] void fail_mismatch(const OpDesc& mine, int peer, const void* header, const char* what);
  [[noreturn]] void fail_timeout(const OpDesc& desc, const std::string& waiting_for);
  [[noreturn]] void report_mismatch(const OpDesc& desc, const std::vector<int>& peers);
  [[noreturn]] void fail_peer(const OpDesc& desc, int peer, const std::string& why);
  [[noreturn]] void fail_aborted(const OpDesc& desc);
  // `failed`: the rank the notice is about, when one failed.
  void notify_peers(ErrorCode code, const std::string& text, std::uint64_t seq, int failed = -1);
  // Notices from peers about collectives up to `up_to` (0-sequence notices always count); empty when none.
  std::string collect_notices(ErrorCode* code, std::uint64_t up_to, std::vector<int>* failed = nullptr) const;
  std::string progress_report(const OpDesc& desc, std::vector<int>* missing_ranks = nullptr);
  std::string missing_report(const OpDesc& desc, core::Clock::time_point now, std::vector<int>* missing_ranks);
  std::string missing_ranks_status(std::vector<int> ranks) const;
  void report_stall(const OpDesc& desc, core::Clock::time_point now);

  // The watch over a waiting run (links_watch.cpp): start_watch() when a run
  // begins; watch_peers() from its wait loop reads the peers' progress
  // while it is stalled and throws when a peer runs another call of it.
  void start_watch() noexcept;
  void watch_peers(const OpDesc& desc);
  // Advances this rank's beat (Progress::beat) when it is due: it waits, and is not hung.
  void beat(core::Clock::time_point now) noexcept;
  void read_progress();
  void look_at_copies(const OpDesc& desc, core::Clock::time_point now);
  // Peer p failed, does not answer READs, or sits in a collective without
  // making progress: nobody should wait for it.
  bool unresponsive(int p, core::Clock::time_point now) const;

  std::shared_ptr<Device> device_;
  int rank_;
  int size_;
  LinksConfig config_;
  int local_ranks_;  // the ranks on this rank's host, itself included: what its memory must hold
  // Per peer, written by the executor, read by the metrics endpoint.
  std::unique_ptr<std::atomic<std::uint64_t>[]> sent_bytes_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> received_bytes_;
  // Shared with the Links a hand_over() gives them to: each region is
  // deregistered, and each QP destroyed, before these go.
  std::shared_ptr<ProtectionDomain> pd_;
  std::shared_ptr<CompletionQueue> send_cq_;
  std::shared_ptr<CompletionQueue> recv_cq_;
  std::uint16_t generation_ = 0;  // see make_wr_id
  int kept_connections_ = 0;
  Handover* lent_from_ = nullptr;  // see kept()
  std::vector<int> lent_peers_;    // the peers whose QP came from it
  // Takes the QPs to peers that both ends of the pair kept in `from` (links_connect.cpp).
  void adopt_kept(Handover* from);
  // Gives lent_from_ back the QPs nothing was posted on (links_connect.cpp).
  void give_back() noexcept;
  std::unique_ptr<Layout> layout_;
  std::unique_ptr<MemoryRegion> region_;
  char* base_ = nullptr;
  std::vector<Peer> peers_;
  Control* control_ = nullptr;
  std::vector<std::uint64_t> credit_wait_;  // per peer: the credit this run must see before it ends
  core::Clock::time_point watch_started_{}, next_look_{}, next_beat_{};
  StatusReader status_reader_;
  std::chrono::milliseconds stall_warn_{0};
  bool stall_reported_ = false;                                        // this run's stall is reported
  std::uint64_t reads_outstanding_ = 0;                                // READs of peers' progress in flight
  std::vector<std::vector<std::uint32_t>> send_queues_, recv_queues_;  // reused by run()
  std::unique_ptr<RunScratch> run_scratch_;
  bool ordered_ = false;  // DeviceCaps::ordered_write_placement: one WRITE per message
  bool network_ = false;  // this rank reaches a peer over a network link
  LinkFigures figures_;
  bool any_network_ = false;               // some rank does (network())
  std::vector<std::uint64_t> salts_from_;  // per sender: see pair_salt()
  std::uint64_t salt_from(int sender) const;
  std::vector<std::uint64_t> p2p_send_seq_, p2p_recv_seq_;
  // Set with the reason (mark_aborted), so a thread that sees it set finds the reason whole.
  std::atomic<bool> aborted_{false};
  mutable core::Mutex abort_mutex_;
  std::string abort_reason_ RDMX_GUARDED_BY(abort_mutex_);
  // Set when revoke() came first: every later call reports the failure.
  bool revoked_ RDMX_GUARDED_BY(abort_mutex_) = false;
  std::vector<int> failed_ranks_ RDMX_GUARDED_BY(abort_mutex_);
  void mark_aborted(std::string reason);
  core::Mutex drive_mutex_;
  std::atomic<bool> abort_notice_pending_{false};  // abort() asked; no driver has told the peers yet
  // Tells the peers of an abort if asked and no other thread drives.
  void send_pending_abort_notice();
  std::uint64_t outstanding_signaled_ = 0;       // signaled WRITEs in flight
  std::unique_ptr<RegistrationCache> user_mrs_;  // user buffers given to collectives
  // Device buffers peers write into, registered for the running operation only (rkey_for).
  std::vector<std::unique_ptr<MemoryRegion>> operation_mrs_;
  std::unique_ptr<MemoryRegion> scratch_mr_;
  // Declared in the order that frees them safely: work, then the
  // registration, then the memory.
  core::cuda::DeviceAllocation device_scratch_;
  std::unique_ptr<MemoryRegion> device_scratch_mr_;
  std::unique_ptr<DeviceOps> device_ops_;
  std::chrono::milliseconds timeout_;
  std::vector<std::string> published_keys_;
  bool said_goodbye_ = false;         // say_goodbye() ran
  bool heard_every_goodbye_ = false;  // ... and every peer's goodbye arrived
};

}  // namespace rdmx::coll
