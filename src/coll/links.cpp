// SPDX-License-Identifier: MIT
#include "coll/links.hpp"

#include <sched.h>

#include <algorithm>
#include <cstring>

#include "coll/cuda/device_ops.hpp"
#include "coll/links_layout.hpp"
#include "coll/links_run.hpp"
#include "coll/reduce.hpp"
#include "services/config.hpp"
#include "services/log.hpp"
#include "services/race_annotations.hpp"

namespace rdmx::coll {
using namespace wire;

std::uint64_t Links::salt_from(int sender) const { return salts_from_[static_cast<std::size_t>(sender)]; }

// ---------------------------------------------------------------------------
Links::Links(std::shared_ptr<Device> device, Store& store, int rank, int size, const std::string& tag,
             const LinksConfig& config, std::chrono::milliseconds timeout, Handover* from)
    : device_(std::move(device)),
      rank_(rank),
      size_(size),
      config_(config),
      local_ranks_(config.host_of.empty()
                       ? size
                       : static_cast<int>(std::count(config.host_of.begin(), config.host_of.end(),
                                                     config.host_of[static_cast<std::size_t>(rank)]))),
      sent_bytes_(new std::atomic<std::uint64_t>[static_cast<std::size_t>(size)]()),
      received_bytes_(new std::atomic<std::uint64_t>[static_cast<std::size_t>(size)]()),
      timeout_(timeout) {
  store_ = &store;
  tag_ = tag;
  if (config_.chunk < kLine || config_.chunk % kLine != 0 || config_.slots < 2) {
    throw Error(ErrorCode::Config,
                "collective buffers: chunk " + std::to_string(config_.chunk) + " bytes x " +
                    std::to_string(config_.slots) + " slots is not usable",
                {.op = "communicator create",
                 .rank = rank,
                 .hint = "RDMX_COLL_BUFFSIZE / RDMX_COLL_SLOTS must give chunks of at least 64 bytes (a multiple of "
                         "64) and at least 2 slots"});
  }
  layout_ = std::make_unique<Layout>(static_cast<std::size_t>(size), config_);
  if (from) {
    pd_ = from->pd;
    send_cq_ = from->send_cq;
    recv_cq_ = from->recv_cq;
    generation_ = from->generation++;
  } else {
    pd_ = device_->alloc_pd();
    // Completions: signaled WRITEs (one in kSignalEvery, guards of in-place
    // sends) and diagnostic READs. The receive CQ only exists because a QP needs one.
    const std::size_t cq_depth = std::max<std::size_t>(1024, static_cast<std::size_t>(size) * 256);
    send_cq_ = device_->create_cq(cq_depth);
    recv_cq_ = device_->create_cq(16);
  }
  user_mrs_ = std::make_unique<RegistrationCache>(*pd_, device_->caps());
  const Access access = Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead;
  // Room for every peer, memory for what the pairs use: a peer's control
  // words become resident when the pair connects (make_pair_resident), its
  // slots as data first passes through them.
  region_ = pd_->allocate_memory(layout_->total, access, Residency::OnFirstTouch);
  base_ = static_cast<char*>(region_->addr());
  control_ = reinterpret_cast<Control*>(base_);
  make_resident(base_, layout_->credit);
  make_pair_resident(rank_);
  peers_.resize(static_cast<std::size_t>(size));
  p2p_send_seq_.assign(static_cast<std::size_t>(size), 0);
  credit_wait_.assign(static_cast<std::size_t>(size), 0);
  run_scratch_ = std::make_unique<RunScratch>();
  p2p_recv_seq_.assign(static_cast<std::size_t>(size), 0);

  salts_from_.resize(static_cast<std::size_t>(size));
  for (int p = 0; p < size; ++p)
    salts_from_[static_cast<std::size_t>(p)] = pair_salt(reinterpret_cast<std::uintptr_t>(base_), p);
  ordered_ = device_->caps().ordered_write_placement;
  publish_region();
  lent_from_ = from;
  try {
    if (from != nullptr) adopt_kept(from);
    std::vector<int> ring;
    for (int p : {(rank + 1) % size, (rank + size - 1) % size}) {
      if (p != rank && std::find(ring.begin(), ring.end(), p) == ring.end()) ring.push_back(p);
    }
    try {
      connect(ring, core::deadline_after(timeout_));
    } catch (const Error& e) {
      throw Error(
          e.code(), "communicator create: connecting to the ring neighbours: " + e.message(),
          {.op = "communicator create", .rank = rank, .peer_rank = e.context().peer_rank, .hint = e.context().hint});
    }
    agree_on_figures();
  } catch (...) {
    give_back();
    throw;
  }
  RDMX_INFO("communicator %s: rank %d of %d, %zu x %zu B buffers per peer, %zu bytes registered, %d peers connected",
            tag.c_str(), rank, size, static_cast<std::size_t>(config_.slots), config_.chunk, layout_->total,
            connected_peers());
}

// Teardown says goodbye: every rank tells its peers it is leaving, lets its
// WRITEs land, and waits (briefly) for their goodbyes, so that no rank
// closes its QPs while a peer still has traffic in flight to it (which the
// peer would report as a lost connection). The goodbye is each rank's last
// WRITE to a peer and is signaled, so once a rank has every goodbye, its
// peers send it nothing more. After a failure the wait is short and skips
// the peers that failed or stopped answering: they will never say goodbye.
bool Links::say_goodbye() noexcept {
  if (said_goodbye_) return heard_every_goodbye_;
  said_goodbye_ = true;
  const bool failed = aborted();
  const auto now = core::Clock::now();
  const auto deadline =
      now + std::min(timeout_, failed ? std::chrono::milliseconds(2000) : std::chrono::milliseconds(5000));
  std::vector<char> expected(static_cast<std::size_t>(size_), 0), skip(static_cast<std::size_t>(size_), 0);
  for (int p = 0; p < size_; ++p) {
    expected[static_cast<std::size_t>(p)] = live(p) && !(failed && unresponsive(p, now));
    skip[static_cast<std::size_t>(p)] = !expected[static_cast<std::size_t>(p)];
  }
  try {
    auto* source = reinterpret_cast<Word*>(base_ + layout_->goodbye + static_cast<std::size_t>(rank_) * kLine);
    source->value.store(1, std::memory_order_relaxed);
    for (int p = 0; p < size_; ++p) {
      if (live(p)) write_to_peer(p, source, 8, layout_->goodbye + static_cast<std::size_t>(rank_) * kLine, true);
    }
    drain(deadline, &skip);
    core::wait_until(
        [&] {
          for (int p = 0; p < size_; ++p) {
            if (!expected[static_cast<std::size_t>(p)] || !live(p)) continue;
            auto* word = reinterpret_cast<const Word*>(base_ + layout_->goodbye + static_cast<std::size_t>(p) * kLine);
            if (word->value.load(std::memory_order_acquire) == 0) return false;
          }
          return true;
        },
        region_->write_doorbell(), deadline, {.progress = [this] { device_->progress(); }});
  } catch (const std::exception& e) {
    RDMX_INFO("communicator teardown on rank %d: %s", rank_, e.what());
  }
  heard_every_goodbye_ = true;
  for (int p = 0; p < size_; ++p) {
    auto* word = reinterpret_cast<const Word*>(base_ + layout_->goodbye + static_cast<std::size_t>(p) * kLine);
    // A peer never connected has nothing in flight and read none of this rank's keys.
    if (p != rank_ && peers_[static_cast<std::size_t>(p)].qp && word->value.load(std::memory_order_acquire) == 0)
      heard_every_goodbye_ = false;
  }
  if (heard_every_goodbye_) forget_dials();
  return heard_every_goodbye_;
}

Links::~Links() {
  give_back();
  say_goodbye();
  for (auto& peer : peers_) peer.qp.reset();
}

Links::PeerTraffic Links::traffic(int peer) const noexcept {
  if (peer < 0 || peer >= size_) return {};
  const auto p = static_cast<std::size_t>(peer);
  return {.sent = sent_bytes_[p].load(std::memory_order_relaxed),
          .received = received_bytes_[p].load(std::memory_order_relaxed)};
}

bool Links::direct_writes(int peer) const { return peers_[static_cast<std::size_t>(peer)].direct_writes; }

std::string Links::peer_provider(int peer) const {
  const auto& qp = peers_[static_cast<std::size_t>(peer)].qp;
  return qp ? qp->provider() : std::string();
}

// ---------------------------------------------------------------------------
void Links::post(int peer_index, const SendWr& request) {
  Peer& peer = peers_[static_cast<std::size_t>(peer_index)];
  SendWr wr = request;
  if (!wr.signaled) wr.wr_id = make_wr_id(kPlain, peer_index, generation_);
  peer.posted = true;
  for (int attempt = 0;; ++attempt) {
    if (peer.qp->try_post_send(wr) == PostResult::Ok) return;
    // Still full after this long: post_send throws QueueFull with the QP's context.
    if (attempt > 1000000) return peer.qp->post_send(wr);
    // The send queue is full of unsignaled WRs waiting for a signaled one:
    // reap completions and let the provider move.
    device_->progress();
    poll_send_cq();
    if (aborted()) return;
    sched_yield();
  }
}

void Links::poll_send_cq() {
  if (outstanding_signaled_ == 0 && reads_outstanding_ == 0) return;
  WorkCompletion wcs[32];
  for (;;) {
    const std::size_t n = send_cq_->poll(wcs);
    for (std::size_t i = 0; i < n; ++i) {
      const WorkCompletion& wc = wcs[i];
      if (wr_generation(wc.wr_id) != generation_) continue;  // the predecessor's (Handover)
      const WrKind kind = wr_kind(wc.wr_id);
      const int p = wr_peer(wc.wr_id);
      if (kind == kRecycle && outstanding_signaled_ > 0) {
        --outstanding_signaled_;
        if (p >= 0 && p < size_ && peers_[static_cast<std::size_t>(p)].signaled_out > 0) {
          --peers_[static_cast<std::size_t>(p)].signaled_out;
        }
      }
      if (kind == kDiag && p >= 0 && p < size_) {
        Peer& peer = peers_[static_cast<std::size_t>(p)];
        if (peer.reading && reads_outstanding_ > 0) --reads_outstanding_;
        peer.reading = false;
        peer.fresh = wc.status == WcStatus::Success;
      }
      if (wc.status != WcStatus::Success && p >= 0 && p < size_) {
        Peer& peer = peers_[static_cast<std::size_t>(p)];
        if (peer.failure.empty()) {
          peer.failure = std::string(to_string(wc.status)) +
                         (peer.qp && !peer.qp->error_reason().empty() ? ": " + peer.qp->error_reason() : "");
        }
      }
    }
    if (n < std::size(wcs)) return;
  }
}

std::uint32_t Links::lkey_for(const void* addr, std::size_t bytes) {
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  for (const MemoryRegion* mr : {scratch_mr_.get(), device_scratch_mr_.get()}) {
    if (mr == nullptr) continue;
    const auto base = reinterpret_cast<std::uintptr_t>(mr->addr());
    if (a >= base && a + bytes <= base + mr->length()) return mr->lkey();
  }
  return user_mrs_->get(const_cast<void*>(addr), bytes, Access::LocalWrite).lkey();
}

// Receive buffers a peer writes into directly are registered with remote
// write access while they stay in the cache: peers of one communicator are
// trusted, as with NCCL's user-buffer registration. Peers learn the rkey
// within the operation that uses it, and nothing is in flight between
// operations, so the cache may drop a registration at any get().
//
// Device memory is the exception: a peer may open it (CUDA IPC, shm's peer
// mapping), and cudaMalloc memory freed while another process has it open
// is undefined. The cache cannot see cudaFree, so such a buffer is
// registered for the one operation, and its deregistration when the
// operation ends has the peers close what they opened.
std::uint32_t Links::rkey_for(void* addr, std::size_t bytes) {
  if (memory_type(addr, bytes) == MemoryType::Cuda) {
    operation_mrs_.push_back(pd_->register_memory(addr, bytes, Access::LocalWrite | Access::RemoteWrite));
    return operation_mrs_.back()->rkey();
  }
  return user_mrs_->get(addr, bytes, Access::LocalWrite | Access::RemoteWrite).rkey();
}

void* Links::scratch(std::size_t bytes, const DeviceOps* device) {
  if (device != nullptr) {
    if (!device_scratch_mr_ || device_scratch_.device() != device->device() || device_scratch_.size() < bytes) {
      const std::size_t grown = device_scratch_.device() == device->device() ? 2 * device_scratch_.size() : 0;
      const std::size_t want = std::max<std::size_t>({bytes, grown, 4096});
      device_scratch_mr_.reset();
      device_scratch_ = core::cuda::DeviceAllocation();
      device_scratch_ = core::cuda::DeviceAllocation(want, device->device(), "collective scratch on the GPU");
      device_scratch_mr_ = pd_->register_memory(device_scratch_.get(), want, Access::LocalWrite);
    }
    return device_scratch_.get();
  }
  if (!scratch_mr_ || scratch_mr_->length() < bytes) {
    const std::size_t want = std::max<std::size_t>({bytes, scratch_mr_ ? 2 * scratch_mr_->length() : 0, 4096});
    scratch_mr_.reset();
    scratch_mr_ = pd_->allocate_memory(want, Access::LocalWrite);
  }
  return scratch_mr_->addr();
}

DeviceOps& Links::device_ops(int gpu) {
  if (!device_ops_ || device_ops_->device() != gpu) {
    device_ops_.reset();
    device_ops_ = std::make_unique<DeviceOps>(gpu);
  }
  return *device_ops_;
}

bool Links::live(int p) const {
  const Peer& peer = peers_[static_cast<std::size_t>(p)];
  return p != rank_ && peer.qp && peer.qp->state() == QpState::Rts;
}

const std::atomic<std::uint64_t>& Links::credit_word(int p) const {
  return reinterpret_cast<const Word*>(base_ + layout_->credit + static_cast<std::size_t>(p) * kLine)->value;
}

// WRITEs `length` bytes of this rank's region at `local` into peer p's region
// at `remote_offset`, signaled once in kSignalEvery so the send queue recycles.
void Links::write_to_peer(int p, const void* local, std::uint32_t length, std::size_t remote_offset, bool signal) {
  Peer& peer = peers_[static_cast<std::size_t>(p)];
  Sge sge{reinterpret_cast<std::uint64_t>(local), length, region_->lkey()};
  SendWr wr;
  wr.opcode = Opcode::RdmaWrite;
  wr.sg_list = {&sge, 1};
  wr.remote_addr = peer.remote_base + remote_offset;
  wr.rkey = peer.rkey;
  wr.signaled = ++peer.unsignaled >= kSignalEvery || signal;
  if (wr.signaled) {
    peer.unsignaled = 0;
    wr.wr_id = make_wr_id(kRecycle, p, generation_);
    ++outstanding_signaled_;
    ++peer.signaled_out;
  }
  post(p, wr);
}

void Links::return_credit(Peer& peer, bool force) {
  const std::uint64_t pending = peer.consumed - peer.credited;
  if (pending == 0 || (!force && pending < config_.slots / 2)) return;
  const int p = static_cast<int>(&peer - peers_.data());
  auto* src = reinterpret_cast<Word*>(base_ + layout_->consumed + static_cast<std::size_t>(p) * kLine);
  {
    // The previous credit's WRITE may still be reading this word: the peer
    // takes the old count or the new, and counts only grow.
    const core::RacingPlacementScope racing;
    src->value.store(peer.consumed, std::memory_order_relaxed);
  }
  peer.credited = peer.consumed;
  write_to_peer(p, src, 8, layout_->credit + static_cast<std::size_t>(rank_) * kLine);
}

void Links::drain(core::Clock::time_point deadline, const std::vector<char>* skip) {
  // One signaled zero-length WRITE per peer that was sent anything: WRs
  // complete in order, so its completion covers everything before it.
  for (int p = 0; p < size_; ++p) {
    Peer& peer = peers_[static_cast<std::size_t>(p)];
    if (!live(p) || peer.unsignaled == 0) continue;
    SendWr wr;
    wr.opcode = Opcode::RdmaWrite;
    wr.remote_addr = peer.remote_base;
    wr.rkey = peer.rkey;
    wr.wr_id = make_wr_id(kRecycle, p, generation_);
    peer.unsignaled = 0;
    ++outstanding_signaled_;
    ++peer.signaled_out;
    try {
      post(p, wr);
    } catch (const Error&) {
      --outstanding_signaled_;
      --peer.signaled_out;
    }
  }
  auto r = core::wait_until(
      [&] {
        poll_send_cq();
        for (int p = 0; p < size_; ++p) {
          if (peers_[static_cast<std::size_t>(p)].signaled_out != 0 &&
              (skip == nullptr || !(*skip)[static_cast<std::size_t>(p)])) {
            return false;
          }
        }
        return true;
      },
      nullptr, deadline, {.progress = [this] { device_->progress(); }});
  if (r != core::WaitResult::Ready) {
    throw Error(ErrorCode::Timeout,
                std::to_string(outstanding_signaled_) + " signaled WRITEs did not complete while draining",
                {.op = "communicator drain", .rank = rank_});
  }
}

// ---------------------------------------------------------------------------
void Links::notify_peers(ErrorCode code, const std::string& text, std::uint64_t seq, int failed) {
  Notice& notice = control_->my_notice;
  {
    // A previous notice's WRITE may still be reading it: a peer then gets a
    // torn copy, which fails its seal, and reads the whole one that follows.
    const core::RacingPlacementScope racing;
    std::memset(&notice, 0, sizeof(notice));
    notice.code = static_cast<std::uint32_t>(code);
    notice.seq = seq;
    notice.failed = failed >= 0 ? static_cast<std::uint32_t>(failed) + 1 : 0;
    std::memcpy(notice.text, text.data(), std::min(text.size(), sizeof(notice.text) - 1));
    notice.seal = wire::notice_seal(notice);
  }
  control_->abort_source.value.store(static_cast<std::uint64_t>(rank_) + 1, std::memory_order_relaxed);
  for (int p = 0; p < size_; ++p) {
    if (!live(p)) continue;
    try {
      // The text first: WRITEs land in order, so a peer that sees the flag sees the text.
      write_to_peer(p, &notice, sizeof(Notice), layout_->notices + static_cast<std::size_t>(rank_) * sizeof(Notice));
      write_to_peer(p, &control_->abort_source, 8, offsetof(Control, abort_flag));
    } catch (const Error& e) {
      RDMX_INFO("rank %d: could not tell rank %d about the failure: %s", rank_, p, e.what());
    }
  }
}

std::string Links::collect_notices(ErrorCode* code, std::uint64_t up_to, std::vector<int>* failed) const {
  std::string out;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || !peers_[static_cast<std::size_t>(p)].qp) continue;  // only a connected peer writes one
    const auto* slot =
        reinterpret_cast<const Notice*>(base_ + layout_->notices + static_cast<std::size_t>(p) * sizeof(Notice));
    const std::uint64_t seal = std::atomic_ref<const std::uint64_t>(slot->seal).load(std::memory_order_acquire);
    if (seal == 0) continue;
    Notice notice;
    {
      // The peer's WRITE may be landing on it: a torn copy fails its seal.
      const core::RacingPlacementScope racing;
      std::memcpy(&notice, slot, sizeof(notice));
    }
    if (wire::notice_seal(notice) != seal || notice.seq > up_to) continue;
    std::string text(notice.text, strnlen(notice.text, sizeof(notice.text)));
    if (!out.empty()) out += "; ";
    out += "rank " + std::to_string(p) + " reports: " + text;
    if (code != nullptr) *code = static_cast<ErrorCode>(notice.code);
    const int named = static_cast<int>(notice.failed) - 1;
    if (failed != nullptr && named >= 0 && named < size_ &&
        std::find(failed->begin(), failed->end(), named) == failed->end()) {
      failed->push_back(named);
    }
  }
  return out;
}

std::string Links::abort_reason() const {
  core::LockGuard lock(abort_mutex_);
  return abort_reason_;
}

void Links::mark_aborted(std::string reason) {
  {
    core::LockGuard lock(abort_mutex_);
    abort_reason_ = std::move(reason);
  }
  aborted_.store(true, std::memory_order_release);
}

void Links::abort(const std::string& reason) {
  {
    core::LockGuard lock(abort_mutex_);
    if (aborted_.load(std::memory_order_relaxed)) return;  // the first cause stays
    abort_reason_ = reason;
    aborted_.store(true, std::memory_order_release);
  }
  abort_notice_pending_.store(true, std::memory_order_release);
  send_pending_abort_notice();
}

void Links::send_pending_abort_notice() {
  // A driver that holds the lock now checks again after it lets go, so
  // the notice is sent once by whichever thread gets the lock after the
  // request.
  while (abort_notice_pending_.load(std::memory_order_acquire)) {
    if (!drive_mutex_.try_lock()) return;
    const core::LockGuard held(drive_mutex_, core::kAdoptLock);
    if (abort_notice_pending_.exchange(false, std::memory_order_acq_rel)) {
      notify_peers(ErrorCode::PeerFailure, "aborted: " + abort_reason(), 0);
    }
  }
}

void Links::revoke(const std::string& reason, int failed) {
  core::LockGuard lock(abort_mutex_);
  const bool known = std::find(failed_ranks_.begin(), failed_ranks_.end(), failed) != failed_ranks_.end();
  if (!known) {
    failed_ranks_.push_back(failed);
    std::sort(failed_ranks_.begin(), failed_ranks_.end());
  }
  if (aborted_.load(std::memory_order_relaxed)) {
    if (revoked_ && !known) abort_reason_ += "; " + reason;
    return;
  }
  revoked_ = true;
  abort_reason_ = reason;
  aborted_.store(true, std::memory_order_release);
}

Error Links::aborted_error(const std::string& op) const {
  core::LockGuard lock(abort_mutex_);
  if (!revoked_) {
    return Error(ErrorCode::InvalidState,
                 "the communicator is unusable after an earlier error or abort: " + abort_reason_,
                 {.op = op, .rank = rank_, .hint = "destroy it and create a new one", .failed_ranks = failed_ranks_});
  }
  return Error(ErrorCode::PeerFailure, op + ": the communicator is revoked: " + abort_reason_,
               {.op = op,
                .rank = rank_,
                .peer_rank = failed_ranks_.size() == 1 ? failed_ranks_[0] : -1,
                .hint = "shrink() it to go on with the survivors, or destroy it",
                .failed_ranks = failed_ranks_});
}

void Links::fail_aborted(const OpDesc& desc) {
  {
    core::LockGuard lock(abort_mutex_);
    if (!revoked_) {
      throw Error(ErrorCode::InvalidState, "the communicator was aborted: " + abort_reason_,
                  {.op = describe(desc), .rank = rank_, .hint = "create a new communicator"});
    }
  }
  throw aborted_error(describe(desc));
}

void Links::fail_peer(const OpDesc& desc, int peer, const std::string& why) {
  // A peer that failed for a reason of its own (a mismatch it found, a
  // third rank's death) told us first: its notice travels ahead of its
  // disconnection on the same QP. Report that cause.
  ErrorCode code = ErrorCode::PeerFailure;
  std::string text;
  std::vector<int> failed;
  const std::string notices = control_->abort_flag.value.load(std::memory_order_acquire) != 0
                                  ? collect_notices(&code, ~std::uint64_t{0}, &failed)
                                  : std::string();
  if (!notices.empty()) {
    text = describe(desc) + ": " + notices + " (rank " + std::to_string(peer) + " then disconnected: " + why + ")";
    notify_peers(code, notices, desc.p2p() ? 0 : desc.seq, failed.empty() ? -1 : failed[0]);
  } else {
    text = describe(desc) + ": rank " + std::to_string(peer) + " failed: " + why;
    notify_peers(ErrorCode::PeerFailure,
                 "rank " + std::to_string(peer) + " failed during " + describe(desc) + ": " + why,
                 desc.p2p() ? 0 : desc.seq, peer);
  }
  if (code == ErrorCode::PeerFailure && std::find(failed.begin(), failed.end(), peer) == failed.end()) {
    failed.push_back(peer);
  }
  mark_aborted(text);
  throw Error(code, text,
              {.op = describe(desc),
               .rank = rank_,
               .peer_rank = peer,
               .hint = code == ErrorCode::Protocol
                           ? "every rank must call the same collectives in the same order with the same arguments"
                           : "the peer process died, aborted or destroyed its communicator; see its own log",
               .failed_ranks = code == ErrorCode::PeerFailure ? failed : std::vector<int>{}});
}

void Links::fail_mismatch(const OpDesc& mine, int peer, const void* header_ptr, const char* what) {
  const auto& h = *static_cast<const WireHeader*>(header_ptr);
  const OpDesc theirs = wire::described_call(h, h.seq);
  std::string text = "mismatched calls: rank " + std::to_string(peer) + " called " + describe(theirs) + " but rank " +
                     std::to_string(rank_) + " called " + describe(mine);
  if (what != nullptr) text += " (" + std::string(what) + ")";
  notify_peers(ErrorCode::Protocol, text, mine.p2p() ? 0 : mine.seq);
  mark_aborted(text);
  throw Error(ErrorCode::Protocol, text,
              {.op = describe(mine),
               .rank = rank_,
               .peer_rank = peer,
               .hint = "every rank must call the same collectives in the same order with the same type, count, "
                       "operation and root"});
}

// A failed run may leave WRITEs posted, some reading the user's buffers in
// place, and the notice telling the peers why queued behind them. Before
// the error reaches the caller (who may free those buffers), they land, or
// the QPs that still carry them are failed (flushed); peers that stopped
// answering are not waited for. The wait is short: a peer stopped between
// collectives looks like one busy outside rdmx, so it is not skipped, and
// the error must still reach the caller within about a second of
// RDMX_TIMEOUT. Peers that are progressing take the notice in far less.
void Links::settle() noexcept {
  constexpr auto kSettleBound = std::chrono::milliseconds(500);
  try {
    const auto now = core::Clock::now();
    std::vector<char> skip(static_cast<std::size_t>(size_), 0);
    for (int p = 0; p < size_; ++p) skip[static_cast<std::size_t>(p)] = !live(p) || unresponsive(p, now);
    try {
      drain(now + std::min(timeout_, kSettleBound), &skip);
    } catch (const Error& e) {
      RDMX_INFO("rank %d: after a failed collective: %s", rank_, e.what());
    }
    poll_send_cq();
    for (int p = 0; p < size_; ++p) {
      Peer& peer = peers_[static_cast<std::size_t>(p)];
      if (live(p) && peer.signaled_out != 0) {
        peer.qp->set_error("the collective failed (" + abort_reason() + ") with WRITEs still in flight to rank " +
                           std::to_string(p));
      }
    }
  } catch (const std::exception& e) {
    RDMX_INFO("rank %d: settling after a failed collective: %s", rank_, e.what());
  }
}

}  // namespace rdmx::coll
