// SPDX-License-Identifier: MIT
#include "coll/links.hpp"

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "coll/links_layout.hpp"
#include "coll/reduce.hpp"
#include "core/config.hpp"
#include "core/log.hpp"

namespace rdmx::coll {
using namespace wire;

namespace {
// Message flags carry the number xor a per-pair value, so that payload bytes
// left in a slot cannot pass for a flag: both sides derive it from the
// receiver's region address and the sender's rank.
std::uint64_t pair_salt(std::uint64_t receiver_base, int sender) {
  std::uint64_t x = receiver_base ^ (static_cast<std::uint64_t>(sender) + 1) * 0x9e3779b97f4a7c15ULL;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x | 1;
}
}  // namespace

std::uint64_t Links::salt_from(int sender) const { return salts_from_[static_cast<std::size_t>(sender)]; }

// ---------------------------------------------------------------------------
Links::Links(std::shared_ptr<Device> device, Store& store, int rank, int size, const std::string& tag,
             const LinksConfig& config, std::chrono::milliseconds timeout)
    : device_(std::move(device)), rank_(rank), size_(size), config_(config), timeout_(timeout) {
  if (config_.chunk < kLine || config_.chunk % kLine != 0 || config_.slots < 2) {
    throw Error(ErrorCode::Config,
                "collective buffers: chunk " + std::to_string(config_.chunk) + " bytes x " +
                    std::to_string(config_.slots) + " slots is not usable",
                {.op = "communicator create", .rank = rank,
                 .hint = "RDMX_COLL_BUFFSIZE / RDMX_COLL_SLOTS must give chunks of at least 64 bytes (a multiple of "
                         "64) and at least 2 slots"});
  }
  layout_ = std::make_unique<Layout>(static_cast<std::size_t>(size), config_);
  pd_ = device_->alloc_pd();
  user_mrs_ = std::make_unique<RegistrationCache>(*pd_, device_->caps());
  // Completions: signaled WRITEs (one in kSignalEvery, guards of in-place
  // sends) and diagnostic READs. The receive CQ only exists because a QP needs one.
  const std::size_t cq_depth = std::max<std::size_t>(1024, static_cast<std::size_t>(size) * 256);
  send_cq_ = device_->create_cq(cq_depth);
  recv_cq_ = device_->create_cq(16);
  const Access access = Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead;
  region_ = pd_->allocate_memory(layout_->total, access);
  base_ = static_cast<char*>(region_->addr());
  control_ = reinterpret_cast<Control*>(base_);
  peers_.resize(static_cast<std::size_t>(size));
  p2p_send_seq_.assign(static_cast<std::size_t>(size), 0);
  credit_wait_.assign(static_cast<std::size_t>(size), 0);
  run_scratch_ = std::make_unique<RunScratch>();
  p2p_recv_seq_.assign(static_cast<std::size_t>(size), 0);

  Mesh mesh = connect_mesh(store, rank, size, *device_, *pd_, *send_cq_, *recv_cq_, QpCaps{}, tag + "/qp");
  for (int p = 0; p < size; ++p) peers_[static_cast<std::size_t>(p)].qp = std::move(mesh.qps[static_cast<std::size_t>(p)]);

  // Exchange where each region is: "<tag>/region/<rank>" = base:rkey:length.
  std::ostringstream mine;
  mine << reinterpret_cast<std::uintptr_t>(base_) << ':' << region_->rkey() << ':' << layout_->total;
  store.set(tag + "/region/" + std::to_string(rank), std::string_view(mine.str()));
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    const std::string key = tag + "/region/" + std::to_string(p);
    std::string text;
    try {
      text = store.get_string(key);
    } catch (const Error& e) {
      throw Error(e.code(), "communicator create: no buffer address from rank " + std::to_string(p) + ": " + e.message(),
                  {.op = "communicator create", .rank = rank, .peer_rank = p,
                   .hint = "that rank did not reach communicator creation (crashed, hung, or another tag/store)"});
    }
    unsigned long long base = 0, length = 0;
    unsigned rkey = 0;
    if (std::sscanf(text.c_str(), "%llu:%u:%llu", &base, &rkey, &length) != 3 || length != layout_->total) {
      throw Error(ErrorCode::Protocol,
                  "communicator create: rank " + std::to_string(p) + " published buffers '" + text +
                      "' that do not match this rank's layout (" + std::to_string(layout_->total) + " bytes)",
                  {.op = "communicator create", .rank = rank, .peer_rank = p,
                   .hint = "every rank must use the same RDMX_COLL_BUFFSIZE and RDMX_COLL_SLOTS and rdmx version"});
    }
    Peer& peer = peers_[static_cast<std::size_t>(p)];
    peer.remote_base = base;
    peer.rkey = rkey;
    peer.salt = pair_salt(base, rank);
  }
  salts_from_.resize(static_cast<std::size_t>(size));
  for (int p = 0; p < size; ++p) salts_from_[static_cast<std::size_t>(p)] = pair_salt(reinterpret_cast<std::uintptr_t>(base_), p);
  ordered_ = device_->caps().ordered_write_placement;
  RDMX_INFO("communicator %s: rank %d of %d, %zu x %zu B buffers per peer, %zu bytes registered", tag.c_str(), rank,
            size, static_cast<std::size_t>(config_.slots), config_.chunk, layout_->total);
}

// Teardown says goodbye: every rank tells its peers it is leaving, lets its
// WRITEs land, and waits (briefly) for their goodbyes, so that no rank
// closes its QPs while a peer still has traffic in flight to it (which the
// peer would report as a lost connection). The goodbye is each rank's last
// WRITE to a peer and is signaled, so once a rank has every goodbye, its
// peers send it nothing more. After a failure the wait is short and skips
// the peers that failed or stopped answering: they will never say goodbye.
Links::~Links() {
  const bool failed = aborted();
  const auto now = core::Clock::now();
  const auto deadline = now + std::min(timeout_, failed ? std::chrono::milliseconds(2000) : std::chrono::milliseconds(5000));
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
        nullptr, deadline, {.progress = [this] { device_->progress(); }});
  } catch (const std::exception& e) {
    RDMX_INFO("communicator teardown on rank %d: %s", rank_, e.what());
  }
  for (auto& peer : peers_) peer.qp.reset();
}

std::string Links::peer_provider(int peer) const {
  const auto& qp = peers_[static_cast<std::size_t>(peer)].qp;
  return qp ? qp->provider() : std::string();
}

// ---------------------------------------------------------------------------
void Links::post(int peer_index, const SendWr& wr) {
  Peer& peer = peers_[static_cast<std::size_t>(peer_index)];
  for (int attempt = 0;; ++attempt) {
    try {
      peer.qp->post_send(wr);
      return;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::QueueFull || attempt > 1000000) throw;
    }
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
  if (scratch_mr_) {
    const auto base = reinterpret_cast<std::uintptr_t>(scratch_mr_->addr());
    if (a >= base && a + bytes <= base + scratch_mr_->length()) return scratch_mr_->lkey();
  }
  return user_mrs_->get(const_cast<void*>(addr), bytes, Access::LocalWrite).lkey();
}

// Receive buffers a peer writes into directly are registered with remote
// write access while they stay in the cache: peers of one communicator are
// trusted, as with NCCL's user-buffer registration. Peers learn the rkey
// within the operation that uses it, and nothing is in flight between
// operations, so the cache may drop a registration at any get().
std::uint32_t Links::rkey_for(void* addr, std::size_t bytes) {
  return user_mrs_->get(addr, bytes, Access::LocalWrite | Access::RemoteWrite).rkey();
}

void* Links::scratch(std::size_t bytes) {
  if (!scratch_mr_ || scratch_mr_->length() < bytes) {
    const std::size_t want = std::max<std::size_t>({bytes, scratch_mr_ ? 2 * scratch_mr_->length() : 0, 4096});
    scratch_mr_.reset();
    scratch_mr_ = pd_->allocate_memory(want, Access::LocalWrite);
  }
  return scratch_mr_->addr();
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
    wr.wr_id = make_wr_id(kRecycle, p);
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
  src->value.store(peer.consumed, std::memory_order_relaxed);
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
    wr.wr_id = make_wr_id(kRecycle, p);
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
          if (peers_[static_cast<std::size_t>(p)].signaled_out != 0 && (skip == nullptr || !(*skip)[static_cast<std::size_t>(p)])) {
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
void Links::notify_peers(ErrorCode code, const std::string& text, std::uint64_t seq) {
  Notice& notice = control_->my_notice;
  notice.code = static_cast<std::uint32_t>(code);
  notice.seq = seq;
  std::memset(notice.text, 0, sizeof(notice.text));
  std::memcpy(notice.text, text.data(), std::min(text.size(), sizeof(notice.text) - 1));
  notice.valid = 1;
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

std::string Links::collect_notices(ErrorCode* code, std::uint64_t up_to) const {
  std::string out;
  for (int p = 0; p < size_; ++p) {
    const auto* notice = reinterpret_cast<const Notice*>(base_ + layout_->notices + static_cast<std::size_t>(p) * sizeof(Notice));
    if (p == rank_ || std::atomic_ref<const std::uint32_t>(notice->valid).load(std::memory_order_acquire) == 0) continue;
    if (notice->seq > up_to) continue;
    std::string text(notice->text, strnlen(notice->text, sizeof(notice->text)));
    if (!out.empty()) out += "; ";
    out += "rank " + std::to_string(p) + " reports: " + text;
    if (code != nullptr) *code = static_cast<ErrorCode>(notice->code);
  }
  return out;
}

void Links::abort(const std::string& reason) {
  if (aborted_.exchange(true)) return;
  abort_reason_ = reason;
  notify_peers(ErrorCode::PeerFailure, "aborted: " + reason, 0);
}

void Links::fail_aborted(const OpDesc& desc) {
  throw Error(ErrorCode::InvalidState, "the communicator was aborted: " + abort_reason_,
              {.op = describe(desc), .rank = rank_, .hint = "create a new communicator"});
}

void Links::fail_peer(const OpDesc& desc, int peer, const std::string& why) {
  // A peer that failed for a reason of its own (a mismatch it found, a
  // third rank's death) told us first: its notice travels ahead of its
  // disconnection on the same QP. Report that cause.
  ErrorCode code = ErrorCode::PeerFailure;
  std::string text;
  const std::string notices = control_->abort_flag.value.load(std::memory_order_acquire) != 0
                                  ? collect_notices(&code, ~std::uint64_t{0})
                                  : std::string();
  if (!notices.empty()) {
    text = describe(desc) + ": " + notices + " (rank " + std::to_string(peer) + " then disconnected: " + why + ")";
  } else {
    text = describe(desc) + ": rank " + std::to_string(peer) + " failed: " + why;
    notify_peers(ErrorCode::PeerFailure, "rank " + std::to_string(peer) + " failed during " + describe(desc) + ": " + why,
                 desc.p2p() ? 0 : desc.seq);
  }
  aborted_.store(true);
  abort_reason_ = text;
  throw Error(code, text,
              {.op = describe(desc), .rank = rank_, .peer_rank = peer,
               .hint = code == ErrorCode::Protocol
                           ? "every rank must call the same collectives in the same order with the same arguments"
                           : "the peer process died, aborted or destroyed its communicator; see its own log"});
}

void Links::fail_mismatch(const OpDesc& mine, int peer, const void* header_ptr, const char* what) {
  const auto& h = *static_cast<const WireHeader*>(header_ptr);
  const OpDesc theirs = wire::described_call(h, h.seq);
  std::string text = "mismatched calls: rank " + std::to_string(peer) + " called " + describe(theirs) +
                     " but rank " + std::to_string(rank_) + " called " + describe(mine);
  if (what != nullptr) text += " (" + std::string(what) + ")";
  notify_peers(ErrorCode::Protocol, text, mine.p2p() ? 0 : mine.seq);
  aborted_.store(true);
  abort_reason_ = text;
  throw Error(ErrorCode::Protocol, text,
              {.op = describe(mine), .rank = rank_, .peer_rank = peer,
               .hint = "every rank must call the same collectives in the same order with the same type, count, "
                       "operation and root"});
}

// ---------------------------------------------------------------------------
// One run() of a schedule. Its per-transfer state lives in Links::RunScratch
// so that an operation allocates nothing once the vectors have grown.
namespace {
struct SendState {
  std::size_t sent = 0;
  bool any = false;  // a message was posted (zero-byte transfers send one)
  bool any_in_place = false;
  std::uint32_t transfer = 0;
  std::uint64_t seq = 0;
};
struct RecvState {
  bool any = false;
  std::uint32_t transfer = 0;
  std::uint64_t seq = 0;
};

}  // namespace

struct Links::RunScratch {
  std::vector<SendState> send_state;
  std::vector<RecvState> recv_state;
  std::vector<int> active;
  std::vector<std::size_t> send_pos, recv_pos;
};

class Links::RunState {
 public:
  RunState(Links& links, Schedule& schedule, const OpDesc& desc, const Combine& combine)
      : l_(links),
        s_(schedule),
        desc_(desc),
        combine_(combine),
        send_state_(links.run_scratch_->send_state),
        recv_state_(links.run_scratch_->recv_state),
        active_(links.run_scratch_->active),
        send_pos_(links.run_scratch_->send_pos),
        recv_pos_(links.run_scratch_->recv_pos) {
    active_.clear();
    const auto n = static_cast<std::size_t>(l_.size_);
    auto& sq = l_.send_queues_;
    auto& rq = l_.recv_queues_;
    sq.resize(n);
    rq.resize(n);
    for (auto& q : sq) q.clear();
    for (auto& q : rq) q.clear();
    send_state_.assign(s_.sends.size(), {});
    for (std::size_t i = 0; i < s_.sends.size(); ++i) {
      const SendOp& op = s_.sends[i];
      check_peer(op.peer, "send");
      send_state_[i].transfer = static_cast<std::uint32_t>(sq[static_cast<std::size_t>(op.peer)].size());
      send_state_[i].seq = desc_.p2p() ? ++l_.p2p_send_seq_[static_cast<std::size_t>(op.peer)] : desc_.seq;
      sq[static_cast<std::size_t>(op.peer)].push_back(static_cast<std::uint32_t>(i));
    }
    recv_state_.assign(s_.recvs.size(), {});
    for (std::size_t i = 0; i < s_.recvs.size(); ++i) {
      RecvOp& op = s_.recvs[i];
      op.done = 0;
      check_peer(op.peer, "recv");
      recv_state_[i].transfer = static_cast<std::uint32_t>(rq[static_cast<std::size_t>(op.peer)].size());
      recv_state_[i].seq = desc_.p2p() ? ++l_.p2p_recv_seq_[static_cast<std::size_t>(op.peer)] : desc_.seq;
      rq[static_cast<std::size_t>(op.peer)].push_back(static_cast<std::uint32_t>(i));
    }
    for (std::size_t p = 0; p < n; ++p) {
      if (!sq[p].empty() || !rq[p].empty()) active_.push_back(static_cast<int>(p));
    }
    send_pos_.assign(n, 0);
    recv_pos_.assign(n, 0);
    remaining_ = s_.sends.size() + s_.recvs.size();
  }

  bool finished() const noexcept { return remaining_ == 0; }

  // One pass over every peer; true when anything moved.
  bool step() {
    if (l_.control_->abort_flag.value.load(std::memory_order_acquire) != 0) {
      // Notices about a later collective (a peer ahead of this rank) wait
      // until this rank gets there: this one may still complete.
      ErrorCode code = ErrorCode::PeerFailure;
      std::string text = l_.collect_notices(&code, desc_.p2p() ? ~std::uint64_t{0} : desc_.seq);
      if (!text.empty()) fail_notice(code, text);
    }
    if (l_.aborted()) l_.fail_aborted(desc_);
    bool moved = false;
    for (int p : active_) {
      const auto pi = static_cast<std::size_t>(p);
      moved |= pump_sends(p, l_.send_queues_[pi], send_pos_[pi]);
      moved |= pump_recvs(p, l_.recv_queues_[pi], recv_pos_[pi]);
    }
    return moved;
  }

  // Peers whose QP died while transfers with them are pending fail the run;
  // messages that landed before the peer went away are consumed first (a
  // peer that finished and destroyed its communicator is not a failure).
  void check_failures() {
    if (l_.outstanding_signaled_ != 0) l_.poll_send_cq();
    if ((++checks_ & 63) == 0) {
      check_unexpected();
      l_.watch_peers(desc_);
    }
    for (int p : active_) {
      if (!pending(p)) continue;
      Peer& peer = l_.peers_[static_cast<std::size_t>(p)];
      if (peer.failure.empty() && peer.qp->state() != QpState::Error) continue;
      const auto pi = static_cast<std::size_t>(p);
      pump_recvs(p, l_.recv_queues_[pi], recv_pos_[pi]);
      if (!pending(p)) continue;
      l_.fail_peer(desc_, p, !peer.failure.empty() ? peer.failure : peer.qp->error_reason());
    }
  }

  [[noreturn]] void fail_notice(ErrorCode code, const std::string& text) {
    l_.aborted_.store(true);
    l_.abort_reason_ = text;
    throw Error(code, describe(desc_) + ": " + text,
                {.op = describe(desc_), .rank = l_.rank_, .hint = "see the reporting rank's error for the cause"});
  }

  // A message of this very operation from a peer this rank expects nothing
  // (more) from means the ranks run different algorithms or roots: both
  // sides would otherwise wait for each other until the timeout. So does a
  // message of another length than the one expected, whose trailer the
  // receiver does not poll (the watch's READs would find it later).
  void check_unexpected() {
    const Layout& lay = *l_.layout_;
    if (l_.ordered_) {
      for (int p : active_) {
        const auto pi = static_cast<std::size_t>(p);
        if (recv_pos_[pi] < l_.recv_queues_[pi].size()) check_length(p, s_.recvs[l_.recv_queues_[pi][recv_pos_[pi]]]);
      }
    }
    if (desc_.p2p()) return;
    for (int p = 0; p < l_.size_; ++p) {
      const auto pi = static_cast<std::size_t>(p);
      if (p == l_.rank_ || recv_pos_[pi] < l_.recv_queues_[pi].size()) continue;
      const Peer& peer = l_.peers_[pi];
      const std::uint64_t m = peer.consumed + 1;
      const std::uint64_t slot = (m - 1) % lay.slots;
      const auto* h = reinterpret_cast<const WireHeader*>(l_.base_ + lay.inbox_slot(p, slot));
      // Its length is not known here: take the header's (possibly still
      // landing) word for it; arrived() only trusts a matching trailer.
      const std::size_t len = std::min<std::size_t>(
          std::atomic_ref<const std::uint32_t>(h->len).load(std::memory_order_relaxed), l_.config_.chunk);
      if (!arrived(p, slot, m, len)) continue;
      if (h->seq == desc_.seq && h->op != static_cast<std::uint8_t>(CollOp::Send)) {
        const std::string detail = "rank " + std::to_string(p) + " sent this rank a message it expects nothing for";
        l_.fail_mismatch(desc_, p, h, detail.c_str());
      }
    }
  }

  // The next message from p has landed whole at the length its header
  // gives, which is not the length `op` expects: validate() says why.
  void check_length(int p, const RecvOp& op) {
    const Layout& lay = *l_.layout_;
    const Peer& peer = l_.peers_[static_cast<std::size_t>(p)];
    const std::uint64_t m = peer.consumed + 1;
    const std::uint64_t slot = (m - 1) % lay.slots;
    const auto* h = reinterpret_cast<const WireHeader*>(l_.base_ + lay.inbox_slot(p, slot));
    if (std::atomic_ref<const std::uint64_t>(h->msg).load(std::memory_order_relaxed) != m) return;
    const std::size_t expected =
        op.announcement ? sizeof(Announcement) : std::min(l_.config_.chunk, op.bytes - op.done);
    const std::size_t polled = op.direct ? 0 : expected;
    const std::uint16_t flags = std::atomic_ref<const std::uint16_t>(h->flags).load(std::memory_order_relaxed);
    const std::size_t theirs = (flags & kDirect) != 0 ? 0 : std::min<std::size_t>(
        std::atomic_ref<const std::uint32_t>(h->len).load(std::memory_order_relaxed), l_.config_.chunk);
    if (theirs == polled || !arrived(p, slot, m, theirs)) return;
    const auto index = static_cast<std::size_t>(&op - s_.recvs.data());
    validate(p, *h, m, op, recv_state_[index], expected);
  }

  bool pending(int p) const {
    const auto pi = static_cast<std::size_t>(p);
    return send_pos_[pi] < l_.send_queues_[pi].size() || recv_pos_[pi] < l_.recv_queues_[pi].size();
  }

  std::string waiting_for() const {
    for (int p : active_) {
      const auto pi = static_cast<std::size_t>(p);
      if (recv_pos_[pi] < l_.recv_queues_[pi].size()) {
        const RecvOp& op = s_.recvs[l_.recv_queues_[pi][recv_pos_[pi]]];
        return "waiting for " + std::to_string(op.bytes - op.done) + " of " + std::to_string(op.bytes) +
               " bytes from rank " + std::to_string(p);
      }
    }
    for (int p : active_) {
      const auto pi = static_cast<std::size_t>(p);
      if (send_pos_[pi] < l_.send_queues_[pi].size()) {
        return "waiting to send to rank " + std::to_string(p) + " (its buffers are full: it is not receiving)";
      }
    }
    return "waiting for completions";
  }

 private:
  void check_peer(int peer, const char* what) {
    if (peer < 0 || peer >= l_.size_ || peer == l_.rank_) {
      throw Error(ErrorCode::InvalidArgument,
                  std::string("internal schedule error: ") + what + " with rank " + std::to_string(peer),
                  {.op = describe(desc_), .rank = l_.rank_});
    }
  }

  bool recv_complete(int index) const {
    const RecvOp& op = s_.recvs[static_cast<std::size_t>(index)];
    return op.done == op.bytes && recv_state_[static_cast<std::size_t>(index)].any;
  }

  bool send_complete(int index) const {
    const SendOp& op = s_.sends[static_cast<std::size_t>(index)];
    const SendState& st = send_state_[static_cast<std::size_t>(index)];
    return st.sent == op.bytes && st.any;
  }

  bool pump_sends(int p, const std::vector<std::uint32_t>& queue, std::size_t& pos) {
    bool moved = false;
    Peer& peer = l_.peers_[static_cast<std::size_t>(p)];
    const Layout& lay = *l_.layout_;
    while (pos < queue.size()) {
      const std::uint32_t index = queue[pos];
      const SendOp& op = s_.sends[index];
      SendState& st = send_state_[index];
      std::size_t len = op.announce ? 0 : std::min(l_.config_.chunk, op.bytes - st.sent);
      if (op.rtr >= 0 && !recv_complete(op.rtr)) return moved;
      if (op.after >= 0) {
        const RecvOp& dep = s_.recvs[static_cast<std::size_t>(op.after)];
        if (op.stream) {
          if (dep.done < st.sent + len && !recv_complete(op.after)) return moved;
        } else if (!recv_complete(op.after)) {
          return moved;
        }
      }
      const std::uint64_t m = peer.sent + 1;
      if (m > lay.slots) {
        if (l_.credit_word(p).load(std::memory_order_acquire) < m - lay.slots) return moved;
      }
      const std::uint64_t slot = (m - 1) % lay.slots;
      char* stage = l_.base_ + lay.staging_slot(p, slot);
      auto* h = reinterpret_cast<WireHeader*>(stage);
      h->msg = m;
      h->seq = st.seq;
      h->count = desc_.count;
      h->offset = st.sent;
      h->len = static_cast<std::uint32_t>(len);
      h->root = desc_.root;
      h->transfer = static_cast<std::uint16_t>(st.transfer);
      h->op = static_cast<std::uint8_t>(desc_.p2p() ? CollOp::Send : desc_.op);
      h->type = static_cast<std::uint8_t>(desc_.type);
      h->redop = static_cast<std::uint8_t>(desc_.redop);
      h->algo = static_cast<std::uint8_t>(desc_.algo);
      const bool in_place = op.in_place && (len > l_.config_.stage_limit || op.rtr >= 0);
      const bool last = op.announce || st.sent + len == op.bytes;
      st.any_in_place = st.any_in_place || in_place;
      // The last message of a transfer that wrote anything in place asks for
      // credit at once; credit for it covers every earlier message too. So
      // does every transfer of a rooted operation, whose senders would
      // otherwise not learn that a receiver called something else.
      const bool confirm = last && (st.any_in_place || confirm_sends_);
      h->flags = confirm ? kCreditNow : 0;
      if (confirm) l_.credit_wait_[static_cast<std::size_t>(p)] = m;
      const char* src = static_cast<const char*>(op.src) + st.sent;
      const std::uint32_t lkey = l_.region_->lkey();
      if (op.announce) {
        // The payload is where this rank's buffer is, for the peer to write into.
        Announcement a{reinterpret_cast<std::uint64_t>(op.src), op.bytes,
                       l_.rkey_for(const_cast<void*>(op.src), op.bytes), 0};
        len = sizeof(a);
        h->len = static_cast<std::uint32_t>(len);
        h->offset = 0;
        h->flags |= kAnnounce;
        std::memcpy(stage + kHeader, &a, sizeof(a));
        src = stage + kHeader;
      }
      const bool direct = op.rtr >= 0;
      if (direct) {
        // Payload straight into the receiver's buffer; the slot message that
        // follows on the same QP (WRITEs land in order) says it is there.
        const RecvOp& ann = s_.recvs[static_cast<std::size_t>(op.rtr)];
        if (len != 0) {
          Sge data{reinterpret_cast<std::uint64_t>(src), static_cast<std::uint32_t>(len), l_.lkey_for(op.src, op.bytes)};
          SendWr dw;
          dw.opcode = Opcode::RdmaWrite;
          dw.sg_list = {&data, 1};
          dw.remote_addr = ann.remote_addr + op.rtr_offset + (st.sent);
          dw.rkey = ann.remote_key;
          dw.signaled = false;
          ++peer.unsignaled;
          l_.post(p, dw);
        }
        h->flags |= kDirect;
      }
      const std::size_t wire_len = direct ? 0 : len;  // payload bytes in the slot
      const std::size_t trailer = trailer_offset(wire_len);
      // With ordered placement the flag is the message's own last word: one
      // WRITE of header, payload and trailer. Otherwise a second WRITE sets
      // the slot's flag after the message has landed.
      const bool one_write = l_.ordered_;
      Sge sges[3];
      std::size_t nsge = 1;
      if (in_place && !direct) {
        sges[0] = {reinterpret_cast<std::uint64_t>(stage), static_cast<std::uint32_t>(kHeader), lkey};
        sges[1] = {reinterpret_cast<std::uint64_t>(src), static_cast<std::uint32_t>(len), l_.lkey_for(op.src, op.bytes)};
        nsge = 2;
        if (one_write) {  // padding and trailer, from the staging slot
          sges[2] = {reinterpret_cast<std::uint64_t>(stage + kHeader + len),
                     static_cast<std::uint32_t>(trailer + 8 - kHeader - len), lkey};
          nsge = 3;
        }
      } else {
        if (wire_len != 0 && src != stage + kHeader) std::memcpy(stage + kHeader, src, wire_len);
        sges[0] = {reinterpret_cast<std::uint64_t>(stage),
                   static_cast<std::uint32_t>(one_write ? trailer + 8 : kHeader + wire_len), lkey};
      }
      SendWr wr;
      wr.opcode = Opcode::RdmaWrite;
      wr.sg_list = {sges, nsge};
      wr.remote_addr = peer.remote_base + lay.inbox_slot(l_.rank_, slot);
      wr.rkey = peer.rkey;
      st.sent = op.announce ? op.bytes : st.sent + len;
      st.any = true;
      const std::uint64_t flag_value = m ^ peer.salt;
      if (one_write) {
        std::memcpy(stage + trailer, &flag_value, 8);
      } else {
        wr.signaled = false;
        ++peer.unsignaled;
        l_.post(p, wr);
        auto* flag_src = reinterpret_cast<Word*>(l_.base_ + lay.staging_flag(p, slot));
        flag_src->value.store(flag_value, std::memory_order_relaxed);
        sges[0] = {reinterpret_cast<std::uint64_t>(flag_src), 8, lkey};
        wr.sg_list = {sges, 1};
        wr.remote_addr = peer.remote_base + lay.inbox_flag(l_.rank_, slot);
      }
      wr.signaled = ++peer.unsignaled >= kSignalEvery;
      if (wr.signaled) {
        peer.unsignaled = 0;
        wr.wr_id = make_wr_id(kRecycle, p);
        ++l_.outstanding_signaled_;
        ++peer.signaled_out;
      }
      l_.post(p, wr);
      peer.sent = m;
      moved = true;
      if (last) {
        ++pos;
        --remaining_;
      }
    }
    return moved;
  }

  bool pump_recvs(int p, const std::vector<std::uint32_t>& queue, std::size_t& pos) {
    bool moved = false;
    Peer& peer = l_.peers_[static_cast<std::size_t>(p)];
    const Layout& lay = *l_.layout_;
    while (pos < queue.size()) {
      const std::uint32_t index = queue[pos];
      RecvOp& op = s_.recvs[index];
      RecvState& st = recv_state_[index];
      const std::size_t len = op.announcement ? sizeof(Announcement) : std::min(l_.config_.chunk, op.bytes - op.done);
      if (op.after >= 0) {
        const RecvOp& dep = s_.recvs[static_cast<std::size_t>(op.after)];
        if (op.stream) {
          if (dep.done < op.done + len && !recv_complete(op.after)) return moved;
        } else if (!recv_complete(op.after)) {
          return moved;
        }
      }
      if (op.after_send >= 0 && !send_complete(op.after_send) &&
          send_state_[static_cast<std::size_t>(op.after_send)].sent < op.done + len) {
        return moved;
      }
      const std::uint64_t m = peer.consumed + 1;
      const std::uint64_t slot = (m - 1) % lay.slots;
      const char* msg = l_.base_ + lay.inbox_slot(p, slot);
      if (!arrived(p, slot, m, op.direct ? 0 : len)) return moved;
      const auto* h = reinterpret_cast<const WireHeader*>(msg);
      validate(p, *h, m, op, st, len);
      const char* payload = msg + kHeader;
      if (op.announcement) {
        Announcement a;
        std::memcpy(&a, payload, sizeof(a));
        op.remote_addr = a.addr;
        op.remote_key = a.rkey;
        op.done = op.bytes;  // one message, whatever the announced size
        st.any = true;
        peer.consumed = m;
        l_.return_credit(peer, (h->flags & kCreditNow) != 0);
        moved = true;
        ++pos;
        --remaining_;
        continue;
      }
      if (len != 0 && !op.direct) {
        char* dst = static_cast<char*>(op.dst) + op.done;
        if (op.reduce_with != nullptr) {
          combine_.reduce(dst, static_cast<const char*>(op.reduce_with) + op.done, payload, len / combine_.elem);
        } else {
          std::memcpy(dst, payload, len);
        }
        if (op.finalize && combine_.avg_divisor != 0) {
          coll::divide(dst, len / combine_.elem, combine_.type, combine_.avg_divisor);
        }
      }
      op.done += len;
      st.any = true;
      peer.consumed = m;
      l_.return_credit(peer, (h->flags & kCreditNow) != 0);
      moved = true;
      if (op.done == op.bytes) {
        ++pos;
        --remaining_;
      }
    }
    return moved;
  }

  // Has message m from peer p, expected `len` bytes long, landed in its slot?
  // With ordered placement its trailer says so; a stale trailer that happens
  // to hold the value (old payload bytes where a longer message had its
  // payload) is told apart by the header's number, which the message wrote
  // before its trailer.
  bool arrived(int p, std::uint64_t slot, std::uint64_t m, std::size_t len) const {
    const Layout& lay = *l_.layout_;
    const std::uint64_t want = m ^ l_.salt_from(p);
    const char* msg = l_.base_ + lay.inbox_slot(p, slot);
    if (!l_.ordered_) {
      auto* flag = reinterpret_cast<const Word*>(l_.base_ + lay.inbox_flag(p, slot));
      return flag->value.load(std::memory_order_acquire) == want;
    }
    const auto* trailer = reinterpret_cast<const std::uint64_t*>(msg + trailer_offset(len));
    if (std::atomic_ref<const std::uint64_t>(*trailer).load(std::memory_order_acquire) != want) return false;
    return reinterpret_cast<const WireHeader*>(msg)->msg == m;
  }

  void validate(int p, const WireHeader& h, std::uint64_t m, const RecvOp& op, const RecvState& st, std::size_t len) {
    if (h.msg != m) {
      l_.fail_peer(desc_, p,
                   "malformed message " + std::to_string(m) + " (numbered " + std::to_string(h.msg) +
                       "): its buffers were overwritten or it runs another rdmx version");
    }
    const bool theirs_p2p = h.op == static_cast<std::uint8_t>(CollOp::Send);
    bool same;
    if (desc_.p2p()) {
      same = theirs_p2p && h.seq == st.seq && h.type == static_cast<std::uint8_t>(desc_.type);
    } else {
      same = !theirs_p2p && h.seq == desc_.seq && h.op == static_cast<std::uint8_t>(desc_.op) &&
             h.type == static_cast<std::uint8_t>(desc_.type) && h.count == desc_.count && h.root == desc_.root &&
             (h.redop == static_cast<std::uint8_t>(desc_.redop) || !needs_redop(desc_.op)) &&
             h.algo == static_cast<std::uint8_t>(desc_.algo);
    }
    if (!same) l_.fail_mismatch(desc_, p, &h, nullptr);
    const std::uint16_t kind = h.flags & (kDirect | kAnnounce);
    const std::uint16_t want = (op.direct ? kDirect : 0) | (op.announcement ? kAnnounce : 0);
    if (h.transfer != static_cast<std::uint16_t>(st.transfer) || h.len != len || kind != want ||
        (!op.announcement && h.offset != op.done)) {
      const std::string detail = "rank " + std::to_string(p) + " sends " + std::to_string(h.len) + " bytes at offset " +
                                 std::to_string(h.offset) + " of transfer " + std::to_string(h.transfer) +
                                 " where rank " + std::to_string(l_.rank_) + " expects " + std::to_string(len) +
                                 " at offset " + std::to_string(op.done) + " of transfer " +
                                 std::to_string(st.transfer) + " (of " + std::to_string(op.bytes) + " bytes)";
      l_.fail_mismatch(desc_, p, &h, detail.c_str());
    }
  }

  Links& l_;
  Schedule& s_;
  const OpDesc& desc_;
  const Combine& combine_;
  std::vector<SendState>& send_state_;
  std::vector<RecvState>& recv_state_;
  std::vector<int>& active_;
  std::vector<std::size_t>& send_pos_;
  std::vector<std::size_t>& recv_pos_;
  std::size_t remaining_ = 0;
  std::uint32_t checks_ = 0;
  const bool confirm_sends_ = desc_.op == CollOp::Broadcast || desc_.op == CollOp::Reduce ||
                              desc_.op == CollOp::Gather || desc_.op == CollOp::Scatter;
};

void Links::run(Schedule& schedule, const OpDesc& desc, const Combine& combine, std::chrono::milliseconds timeout) {
  try {
    run_schedule(schedule, desc, combine, timeout);
  } catch (...) {
    settle();
    throw;
  }
}

// A failed run may leave WRITEs posted, some reading the user's buffers in
// place, and the notice telling the peers why queued behind them. Before
// the error reaches the caller (who may free those buffers), they land, or
// the QPs that still carry them are failed (flushed); peers that stopped
// answering are not waited for.
void Links::settle() noexcept {
  try {
    const auto now = core::Clock::now();
    std::vector<char> skip(static_cast<std::size_t>(size_), 0);
    for (int p = 0; p < size_; ++p) skip[static_cast<std::size_t>(p)] = !live(p) || unresponsive(p, now);
    try {
      drain(now + std::min(timeout_, std::chrono::milliseconds(2000)), &skip);
    } catch (const Error& e) {
      RDMX_INFO("rank %d: after a failed collective: %s", rank_, e.what());
    }
    poll_send_cq();
    for (int p = 0; p < size_; ++p) {
      Peer& peer = peers_[static_cast<std::size_t>(p)];
      if (live(p) && peer.signaled_out != 0) {
        peer.qp->set_error("the collective failed (" + abort_reason_ + ") with WRITEs still in flight to rank " +
                           std::to_string(p));
      }
    }
  } catch (const std::exception& e) {
    RDMX_INFO("rank %d: settling after a failed collective: %s", rank_, e.what());
  }
}

void Links::run_schedule(Schedule& schedule, const OpDesc& desc, const Combine& combine,
                         std::chrono::milliseconds timeout) {
  RunState state(*this, schedule, desc, combine);
  start_watch();
  // Small operations are often done after a few passes: try those before
  // reading the clock for the deadline.
  const bool yield = config_.yield_when_waiting;
  auto progress = [this, &state, yield] {
    device_->progress();
    state.check_failures();
    if (yield) sched_yield();
  };
  for (int pass = 0; pass < 1024 && !state.finished(); ++pass) {
    if (!state.step()) progress();
  }
  const auto deadline = core::deadline_after(timeout);
  core::WaitHooks hooks;
  hooks.progress = [p = &progress] { (*p)(); };  // one pointer: no allocation
  while (!state.finished()) {
    auto r = core::wait_until([st = &state] { return st->step() || st->finished(); }, nullptr, deadline, hooks);
    if (r == core::WaitResult::Timeout) fail_timeout(desc, state.waiting_for());
    if (r == core::WaitResult::Aborted) fail_aborted(desc);
  }
  // User memory that in-place WRITEs read is released only once the peers
  // have consumed those messages (their credit says so).
  bool waiting = false;
  for (int p = 0; p < size_; ++p) waiting = waiting || credit_wait_[static_cast<std::size_t>(p)] != 0;
  if (waiting) {
    auto credited = [&] {
      for (int p = 0; p < size_; ++p) {
        const std::uint64_t need = credit_wait_[static_cast<std::size_t>(p)];
        if (need == 0) continue;
        if (credit_word(p).load(std::memory_order_acquire) < need) {
          Peer& peer = peers_[static_cast<std::size_t>(p)];
          if (!peer.failure.empty() || peer.qp->state() == QpState::Error) {
            fail_peer(desc, p, "it did not confirm receiving this rank's last message: " +
                                   (!peer.failure.empty() ? peer.failure : peer.qp->error_reason()));
          }
          return false;
        }
        credit_wait_[static_cast<std::size_t>(p)] = 0;
      }
      return true;
    };
    auto r = core::wait_until(credited, nullptr, deadline, hooks);
    if (r == core::WaitResult::Timeout) fail_timeout(desc, "waiting for the peers to confirm its last messages");
    if (r == core::WaitResult::Aborted) fail_aborted(desc);
  }
}

}  // namespace rdmx::coll
