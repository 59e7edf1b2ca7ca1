// SPDX-License-Identifier: MIT
#include "providers/verbs/verbs_qp.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include "services/kernel_random.hpp"

#include "driver/address_bundle.hpp"
#include "driver/work_request.hpp"
#include "providers/verbs/verbs_device.hpp"
#include "services/config.hpp"
#include "services/log.hpp"

namespace rdmx::verbs {
namespace {

ibv_wr_opcode wr_opcode(Opcode op) {
  switch (op) {
    case Opcode::Send: return IBV_WR_SEND;
    case Opcode::SendWithImm: return IBV_WR_SEND_WITH_IMM;
    case Opcode::RdmaWrite: return IBV_WR_RDMA_WRITE;
    case Opcode::RdmaWriteWithImm: return IBV_WR_RDMA_WRITE_WITH_IMM;
    case Opcode::RdmaRead: return IBV_WR_RDMA_READ;
    case Opcode::AtomicFetchAdd: return IBV_WR_ATOMIC_FETCH_AND_ADD;
    case Opcode::AtomicCmpSwap: return IBV_WR_ATOMIC_CMP_AND_SWP;
  }
  return IBV_WR_SEND;
}

// IB's RNR timer codes (IBTA table 45) in microseconds, by code.
constexpr std::uint32_t kRnrTimerUs[32] = {
    655360, 10,   20,   30,   40,    60,    80,    120,   160,   240,   320,   480,    640,    960,    1280,   1920,
    2560,   3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};
constexpr int kRnrRetries = 6;  // the most IB counts; 7 means "retry forever"
constexpr int kRnrForever = 7;
constexpr std::uint8_t kShortRnrTimer = 14;  // 1.28 ms

// An RNR window longer than IB can count (6 waits of at most 655 ms) is
// served by retrying forever with a short timer: a SEND then waits as long
// as the receiver is alive, bounded by the caller's CQ wait (RDMX_TIMEOUT).
bool rnr_window_countable(std::chrono::milliseconds window) {
  return window.count() * 1000 <= static_cast<std::int64_t>(kRnrRetries) * kRnrTimerUs[0];
}

// The RNR timer whose kRnrRetries waits cover `window` (the smallest that does).
std::uint8_t rnr_timer_code(std::chrono::milliseconds window) {
  if (!rnr_window_countable(window)) return kShortRnrTimer;
  const double per_try_us = static_cast<double>(window.count()) * 1000.0 / kRnrRetries;
  int best = 0;  // 655 ms, the longest
  for (int code = 1; code < 32; ++code) {
    if (kRnrTimerUs[code] >= per_try_us && (best == 0 || kRnrTimerUs[code] < kRnrTimerUs[best])) best = code;
  }
  return static_cast<std::uint8_t>(best);
}

// Transport retries after a missing ACK: 6, not 7, because rxe reads 7 as
// "forever" (as IB reads rnr_retry 7), and a dead peer must be noticed.
constexpr int kRetryCount = 6;

// The local ACK timeout exponent (4.096 us * 2^t per try, 7 tries) that
// gives up on a silent peer within about half of RDMX_TIMEOUT, so a CQ wait
// bounded by RDMX_TIMEOUT sees RETRY_EXC_ERR rather than its own timeout; at
// most ~1 s per try (t = 18, NCCL's default), at least ~4 ms.
std::uint8_t ack_timeout_code() {
  const double total_us = static_cast<double>(core::timeout().count()) * 1000.0 / 2.0;
  const double per_try = total_us / (kRetryCount + 1) / 4.096;
  int t = per_try > 1 ? static_cast<int>(std::floor(std::log2(per_try))) : 1;
  return static_cast<std::uint8_t>(std::clamp(t, 10, 18));
}

std::uint32_t random_psn() { return static_cast<std::uint32_t>(core::kernel_random64() & 0xffffff); }

}  // namespace

VerbsQp::VerbsQp(VerbsDevice& device, const core::QpParts& parts, const QpCaps& wanted)
    : holds_(parts.holds),
      device_(device),
      pd_(parts.pd),
      send_cq_(parts.send_cq),
      recv_cq_(parts.recv_cq),
      caps_(core::grant_qp_caps(wanted, device.caps(), "verbs")),
      qpn_(device.next_qpn()),
      psn_(random_psn()) {
  signal_interval_ = std::max<std::uint32_t>(1, caps_.max_send_wr / 2);
  chunk_limit_ = std::max<std::uint64_t>(4096, device.port_max_message());
  rxe_quirks_ = device.attr().vendor_id == 0xffffff;  // rdma_rxe's vendor id
  send_slots_.resize(caps_.max_send_wr);
  recv_slots_.resize(caps_.max_recv_wr);
  const int cqe = static_cast<int>(caps_.max_send_wr + caps_.max_recv_wr);
  cq_ = ibv_create_cq(device.context(), cqe, this, device.channel(), 0);
  if (cq_ == nullptr) {
    throw Error(ErrorCode::System, "ibv_create_cq failed on " + device.port().device + ": " + errno_text(errno),
                {.op = "create_qp",
                 .sizes = "cqe=" + std::to_string(cqe),
                 .hint = "lower max_send_wr/max_recv_wr, or check the device's limits (ibv_devinfo -v)"});
  }
  ibv_qp_init_attr init{};
  init.send_cq = cq_;
  init.recv_cq = cq_;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = caps_.max_send_wr;
  init.cap.max_recv_wr = caps_.max_recv_wr;
  init.cap.max_send_sge = caps_.max_send_sge;
  init.cap.max_recv_sge = caps_.max_recv_sge;
  init.cap.max_inline_data = device.inline_limit();
  qp_ = ibv_create_qp(VerbsBinder::pd_of(*pd_.bound()), &init);
  if (qp_ == nullptr) {
    const int err = errno;
    ibv_destroy_cq(cq_);
    throw Error(ErrorCode::System, "ibv_create_qp failed on " + device.port().device + ": " + errno_text(err),
                {.op = "create_qp",
                 .sizes = "max_send_wr=" + std::to_string(caps_.max_send_wr) + " max_recv_wr=" +
                          std::to_string(caps_.max_recv_wr) + " max_sge=" + std::to_string(caps_.max_send_sge),
                 .hint = "lower the QP's caps, or check the device's limits (ibv_devinfo -v)"});
  }
  device_.add_qp(this);
}

VerbsQp::~VerbsQp() {
  device_.remove_qp(this);
  if (int err = ibv_destroy_qp(qp_); err != 0) RDMX_WARN("ibv_destroy_qp failed: %s", std::strerror(err));
  if (int err = ibv_destroy_cq(cq_); err != 0) RDMX_WARN("ibv_destroy_cq failed: %s", std::strerror(err));
}

std::uint32_t VerbsQp::probe_inline_limit(VerbsDevice& device) {
  ibv_pd* pd = ibv_alloc_pd(device.context());
  if (pd == nullptr) return 0;
  ibv_cq* cq = ibv_create_cq(device.context(), 4, nullptr, nullptr, 0);
  std::uint32_t limit = 0;
  for (std::uint32_t want : {256u, 128u, 64u}) {
    if (cq == nullptr) break;
    ibv_qp_init_attr init{};
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = 2;
    init.cap.max_recv_wr = 2;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    init.cap.max_inline_data = want;
    if (ibv_qp* qp = ibv_create_qp(pd, &init)) {
      limit = std::min(want, init.cap.max_inline_data);
      ibv_destroy_qp(qp);
      break;
    }
  }
  if (cq != nullptr) ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  return limit;
}

ErrorContext VerbsQp::context_of(const void* qp, const std::string& op) {
  return static_cast<const VerbsQp*>(qp)->context(op);
}

ErrorContext VerbsQp::context(const std::string& op) const {
  ErrorContext c;
  c.op = op;
  core::LockGuard lock(control_mutex_);
  c.peer_rank = peer_rank_;
  c.peer_addr = peer_;
  return c;
}

DeviceCaps VerbsQp::device_caps() const { return device_.caps(); }

std::string VerbsQp::error_reason() const {
  core::LockGuard lock(control_mutex_);
  return error_reason_;
}

QpAddress VerbsQp::local_address() const {
  const PortChoice& port = device_.port();
  VerbsAddress a;
  a.link_layer = port.link_layer;
  a.mtu = static_cast<std::uint8_t>(port.active_mtu);
  a.port = static_cast<std::uint8_t>(port.port);
  a.rd_atomic = device_.responder_resources();
  a.gid_type = static_cast<std::uint8_t>(port.gid_type);
  a.lid = port.lid;
  a.gid = port.gid;
  a.hw_qpn = qp_->qp_num;
  a.psn = psn_;
  a.qpn = qpn_;
  return a.encode();
}

void VerbsQp::modify(ibv_qp_attr& attr, int mask, const char* step, const std::string& peer) {
  if (int err = ibv_modify_qp(qp_, &attr, mask); err != 0) {
    const PortChoice& port = device_.port();
    std::string hint = "check the device with ibv_devinfo -v";
    if (port.link_layer == LinkLayer::Ethernet && std::strcmp(step, "RTR") == 0) {
      hint = "RoCE address trouble: this side uses GID index " + std::to_string(port.gid_index) + " (" +
             gid_to_string(port.gid) + ", " + to_string(port.gid_type) +
             "); `rdmx info` lists every GID; both sides need the same RoCE version and routable addresses: set "
             "RDMX_IB_GID_INDEX to a RoCE v2 entry with an IPv4 address";
    }
    throw Error(ErrorCode::System,
                std::string("ibv_modify_qp to ") + step + " failed on " + device_.name() + ": " + errno_text(err),
                {.op = "connect", .peer_rank = peer_rank_, .peer_addr = peer, .hint = hint});
  }
}

void VerbsQp::init() {
  core::LockGuard lock(control_mutex_);
  if (state() != QpState::Reset) return;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = static_cast<std::uint8_t>(device_.port().port);
  attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  modify(attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "INIT", "");
  state_.store(QpState::Init, std::memory_order_release);
}

void VerbsQp::connect(const QpAddress& remote, const ConnectOptions& options) {
  const VerbsAddress peer = VerbsAddress::decode(core::part_for_provider(remote, VerbsAddress::is_verbs));
  if (state() == QpState::Reset) init();
  core::LockGuard lock(control_mutex_);
  peer_rank_ = options.peer_rank;
  peer_ = peer.to_string();
  if (state() != QpState::Init) {
    throw Error(ErrorCode::InvalidState, std::string("connect() needs a QP in INIT, this one is ") + to_string(state()),
                {.op = "connect",
                 .peer_rank = options.peer_rank,
                 .peer_addr = peer_,
                 .hint = "create a new QP for a new connection"});
  }
  const PortChoice& port = device_.port();
  if (peer.link_layer != port.link_layer) {
    throw Error(ErrorCode::InvalidArgument,
                std::string("the peer's port is ") + (peer.link_layer == LinkLayer::Ethernet ? "RoCE" : "InfiniBand") +
                    " and this one is not: they cannot talk",
                {.op = "connect",
                 .peer_rank = options.peer_rank,
                 .peer_addr = peer_,
                 .hint = "choose ports of the same fabric on both sides (RDMX_IB_HCA), or use RDMX_PROVIDER=tcp"});
  }
  const std::chrono::milliseconds rnr = options.rnr_timeout.count() >= 0 ? options.rnr_timeout : core::rnr_timeout();
  const auto mtu = static_cast<ibv_mtu>(std::min<int>(peer.mtu, port.active_mtu));

  ibv_qp_attr rtr{};
  rtr.qp_state = IBV_QPS_RTR;
  rtr.path_mtu = mtu;
  rtr.dest_qp_num = peer.hw_qpn;
  rtr.rq_psn = peer.psn;
  rtr.max_dest_rd_atomic = device_.responder_resources();
  rtr.min_rnr_timer = rnr_timer_code(rnr);
  rtr.ah_attr.port_num = static_cast<std::uint8_t>(port.port);
  rtr.ah_attr.dlid = peer.lid;
  rtr.ah_attr.sl = 0;
  if (port.link_layer == LinkLayer::Ethernet || port.gid_index >= 0) {
    rtr.ah_attr.is_global = 1;
    std::memcpy(rtr.ah_attr.grh.dgid.raw, peer.gid.data(), 16);
    rtr.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(port.gid_index);
    rtr.ah_attr.grh.hop_limit = 64;
  }
  modify(rtr,
         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
             IBV_QP_MIN_RNR_TIMER,
         "RTR", peer_);
  state_.store(QpState::Rtr, std::memory_order_release);

  ibv_qp_attr rts{};
  rts.qp_state = IBV_QPS_RTS;
  rts.timeout = ack_timeout_code();
  rts.retry_cnt = kRetryCount;
  rts.rnr_retry = rnr_window_countable(rnr) ? kRnrRetries : kRnrForever;
  rts.sq_psn = psn_;
  rts.max_rd_atomic =
      static_cast<std::uint8_t>(std::max(1, std::min<int>(peer.rd_atomic, device_.attr().max_qp_init_rd_atom)));
  const int rts_mask =
      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
  if (ibv_modify_qp(qp_, &rts, rts_mask) != 0) {
    // In RTR the QP already receives: a request of the peer's that failed
    // here (too long for the receive, a bad key) moves it to ERROR first.
    // That is a later state, not a failed connect.
    ibv_qp_attr now{};
    ibv_qp_init_attr init{};
    if (ibv_query_qp(qp_, &now, IBV_QP_STATE, &init) == 0 && now.qp_state == IBV_QPS_ERR) {
      error_reason_ =
          "moved to ERROR while connecting: a request from " + peer_ + " failed here (its receive completion says how)";
      state_.store(QpState::Error, std::memory_order_release);
      return;
    }
    modify(rts, rts_mask, "RTS", peer_);  // throws with the device's reason
  }
  state_.store(QpState::Rts, std::memory_order_release);
  RDMX_INFO("verbs qp %u (hw 0x%x) connected to %s: path MTU %d, ack timeout code %u, RNR timer code %u", qpn_,
            qp_->qp_num, peer_.c_str(), 128 << mtu, rts.timeout, rtr.min_rnr_timer);
}

void VerbsQp::enter_error(const std::string& reason) {
  {
    core::LockGuard lock(control_mutex_);
    if (state() == QpState::Error) return;
    error_reason_ = reason;
    state_.store(QpState::Error, std::memory_order_release);
  }
  RDMX_INFO("verbs qp %u: ERROR: %s", qpn_, reason.c_str());
}

void VerbsQp::set_error(const std::string& reason) {
  enter_error("set_error: " + reason);  // before the device flushes, so the reason is this one
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  if (int err = ibv_modify_qp(qp_, &attr, IBV_QP_STATE); err != 0) {
    RDMX_WARN("verbs qp %u: ibv_modify_qp to ERROR failed: %s", qpn_, std::strerror(err));
  }
  release_held_flushes();
}

bool VerbsQp::lkeys_valid(std::span<const Sge> sges, Access need, core::CachedKey& cache) {
  for (const Sge& g : sges) {
    if (g.length == 0) continue;
    if (cache.check(device_.registry(), false, &pd_, g.lkey, g.addr, g.length, need) != core::AccessCheck::Ok) {
      return false;
    }
  }
  return true;
}

bool VerbsQp::inline_ok(const SendWr& wr, std::uint64_t bytes, bool lkeys_ok) {
  // The hardware does not check an inline payload's lkey; IB semantics do,
  // so only payloads whose keys the registry confirmed go inline.
  return lkeys_ok && bytes > 0 && bytes <= device_.inline_limit() && core::carries_payload(wr.opcode);
}

// Hardware work requests waiting for one doorbell: pieces of several rdmx
// work requests, chained.
struct VerbsQp::Doorbell {
  static constexpr std::size_t kMax = 16;
  ibv_send_wr chain[kMax];
  ibv_sge sges[kMax][32];
  std::size_t count = 0;
};

void VerbsQp::post_send(const SendWr& wr) { post_list(std::span(&wr, 1), false); }

void VerbsQp::post_send_batch(std::span<const SendWr> wrs) { post_list(wrs, true); }

PostResult VerbsQp::try_post_send(const SendWr& wr) {
  core::LockGuard lock(send_mutex_);
  Doorbell db;
  bool full = false;
  append(wr, db, &full);
  if (full) return PostResult::QueueFull;
  ring(db, wr.opcode);
  return PostResult::Ok;
}

void VerbsQp::post_list(std::span<const SendWr> wrs, bool batch) {
  core::LockGuard lock(send_mutex_);
  Doorbell db;
  for (std::size_t i = 0; i < wrs.size(); ++i) {
    try {
      append(wrs[i], db);
    } catch (const Error& e) {
      ring(db, wrs[i].opcode);
      if (batch) throw core::batch_error(e, i, wrs.size(), wrs[i].wr_id);
      throw;
    }
  }
  ring(db, wrs.empty() ? Opcode::Send : wrs.back().opcode);
}

void VerbsQp::ring(Doorbell& db, Opcode opcode) {
  if (db.count == 0) return;
  for (std::size_t k = 0; k + 1 < db.count; ++k) db.chain[k].next = &db.chain[k + 1];
  db.chain[db.count - 1].next = nullptr;
  const std::uint64_t first = send_next_.load(std::memory_order_relaxed);
  ibv_send_wr* bad = nullptr;
  const int err = ibv_post_send(qp_, db.chain, &bad);
  const std::uint64_t posted = err == 0 ? db.count : static_cast<std::uint64_t>(bad - db.chain);
  send_next_.store(first + posted, std::memory_order_release);
  db.count = 0;
  if (err != 0) {
    ErrorContext c = context(std::string("post_send ") + to_string(opcode));
    c.sizes = "posted " + std::to_string(posted) + " of the list";
    c.hint = "the device refused the work request; ibv_devinfo -v shows its limits";
    throw Error(err == ENOMEM ? ErrorCode::QueueFull : ErrorCode::System, "ibv_post_send failed: " + errno_text(err),
                c);
  }
}

void VerbsQp::append(const SendWr& wr, Doorbell& db, bool* full) {
  const std::uint64_t bytes =
      core::validate_send_wr(wr, caps_, device_.caps().max_msg_size, &VerbsQp::context_of, this);
  const QpState s = state();
  if (s == QpState::Error) {
    ring(db, wr.opcode);  // what came before goes first, so its flushes do
    return hold_flush(wr.wr_id, core::completion_opcode(wr.opcode));
  }
  if (s != QpState::Rts) {
    throw Error(ErrorCode::InvalidState, std::string("post_send needs RTS, the QP is in ") + to_string(s),
                context(std::string("post_send ") + to_string(wr.opcode)));
  }
  // RDMA longer than the port's largest message goes in pieces of at most that.
  const bool splittable =
      wr.opcode == Opcode::RdmaWrite || wr.opcode == Opcode::RdmaWriteWithImm || wr.opcode == Opcode::RdmaRead;
  const std::uint64_t pieces = splittable && bytes > chunk_limit_ ? (bytes + chunk_limit_ - 1) / chunk_limit_ : 1;
  const std::uint64_t first = send_next_.load(std::memory_order_relaxed) + db.count;
  auto free_slots = [&] { return caps_.max_send_wr - (first - send_done_.load(std::memory_order_acquire)); };
  if (free_slots() < pieces) {
    device_.progress();  // completions not yet drained may free slots
    if (free_slots() < pieces && full != nullptr && pieces <= caps_.max_send_wr) {
      *full = true;
      return;
    }
    if (free_slots() < pieces) {
      ErrorContext c = context(std::string("post_send ") + to_string(wr.opcode));
      c.sizes = "max_send_wr=" + std::to_string(caps_.max_send_wr) +
                (pieces > 1 ? " pieces=" + std::to_string(pieces) : std::string());
      c.hint = pieces > caps_.max_send_wr
                   ? "this transfer needs more work requests than the QP has: create it with a larger max_send_wr"
                   : "poll the send CQ before posting more, or create the QP with a larger max_send_wr";
      throw Error(ErrorCode::QueueFull, "send queue full", c);
    }
  }
  const bool lkeys_ok = lkeys_valid(wr.sg_list, Access::None, send_key_cache_);
  const std::uint64_t last = first + pieces - 1;
  const WcOpcode wc_opcode = core::completion_opcode(wr.opcode);
  std::size_t sge_index = 0;     // where the next piece starts in wr.sg_list
  std::uint64_t sge_offset = 0;  // ... and how far into that SGE
  std::uint64_t remote_offset = 0;
  for (std::uint64_t seq = first; seq <= last; ++seq) {
    if (db.count == Doorbell::kMax) ring(db, wr.opcode);
    ibv_send_wr& w = db.chain[db.count];
    ibv_sge* sges = db.sges[db.count];
    w = ibv_send_wr{};
    const bool is_last = seq == last;
    const std::uint64_t piece = pieces == 1 ? bytes : std::min<std::uint64_t>(chunk_limit_, bytes - remote_offset);
    std::uint64_t want = piece;
    int n = 0;
    while (want > 0 && sge_index < wr.sg_list.size()) {
      const Sge& g = wr.sg_list[sge_index];
      const std::uint64_t take = std::min<std::uint64_t>(want, g.length - sge_offset);
      if (take > 0) sges[n++] = ibv_sge{g.addr + sge_offset, static_cast<std::uint32_t>(take), g.lkey};
      want -= take;
      sge_offset += take;
      if (sge_offset == g.length) {
        ++sge_index;
        sge_offset = 0;
      }
    }
    w.wr_id = seq;
    w.sg_list = n > 0 ? sges : nullptr;  // empty SGEs left out: some HCAs read length 0 as 2 GiB
    w.num_sge = n;
    w.opcode = wr_opcode(wr.opcode);
    if (wr.opcode == Opcode::RdmaWriteWithImm && !is_last) w.opcode = IBV_WR_RDMA_WRITE;
    const bool shown = is_last && wr.signaled;
    const bool hw_signaled = shown || since_signal_ + 1 >= signal_interval_;
    since_signal_ = hw_signaled ? 0 : since_signal_ + 1;
    w.send_flags = hw_signaled ? IBV_SEND_SIGNALED : 0;
    if (pieces == 1 && inline_ok(wr, bytes, lkeys_ok)) w.send_flags |= IBV_SEND_INLINE;
    if (w.opcode == IBV_WR_SEND_WITH_IMM || w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM) w.imm_data = htonl(wr.imm_data);
    if (splittable) {
      w.wr.rdma.remote_addr = wr.remote_addr + remote_offset;
      w.wr.rdma.rkey = wr.rkey;
    } else if (core::is_atomic(wr.opcode)) {
      w.wr.atomic.remote_addr = wr.remote_addr;
      w.wr.atomic.rkey = wr.rkey;
      w.wr.atomic.compare_add = wr.compare_add;
      w.wr.atomic.swap = wr.swap;
    }
    remote_offset += piece;
    send_slots_[seq % send_slots_.size()] = {wr.wr_id,  last,  static_cast<std::uint32_t>(bytes),
                                             wc_opcode, shown, !lkeys_ok};
    ++db.count;
  }
}

void VerbsQp::post_recv(const RecvWr& wr) {
  core::validate_recv_wr(wr, caps_, &VerbsQp::context_of, this);
  core::LockGuard lock(recv_mutex_);
  const QpState s = state();
  if (s == QpState::Reset) {
    throw Error(ErrorCode::InvalidState, "post_recv needs INIT or later, the QP is in RESET",
                {.op = "post_recv", .hint = "call init() or connect() first"});
  }
  if (s == QpState::Error) return hold_flush(wr.wr_id, WcOpcode::Recv);
  std::uint64_t seq = recv_next_.load(std::memory_order_relaxed);
  if (seq - recv_done_.load(std::memory_order_acquire) >= caps_.max_recv_wr) {
    ErrorContext c = context("post_recv");
    c.sizes = "max_recv_wr=" + std::to_string(caps_.max_recv_wr);
    c.hint = "poll the receive CQ before posting more";
    throw Error(ErrorCode::QueueFull, "receive queue full", c);
  }
  ibv_sge sges[32];
  int n = 0;
  for (const Sge& g : wr.sg_list) {
    if (g.length == 0) continue;
    sges[n++] = ibv_sge{g.addr, g.length, g.lkey};
  }
  ibv_recv_wr w{};
  w.wr_id = seq | kRecvBit;
  w.sg_list = n > 0 ? sges : nullptr;
  w.num_sge = n;
  recv_slots_[seq % recv_slots_.size()] = {wr.wr_id, !lkeys_valid(wr.sg_list, Access::LocalWrite, recv_key_cache_)};
  ibv_recv_wr* bad = nullptr;
  if (int err = ibv_post_recv(qp_, &w, &bad); err != 0) {
    ErrorContext c = context("post_recv");
    c.hint = "the device refused the receive";
    throw Error(err == ENOMEM ? ErrorCode::QueueFull : ErrorCode::System, "ibv_post_recv failed: " + errno_text(err),
                c);
  }
  recv_next_.store(seq + 1, std::memory_order_release);
}

}  // namespace rdmx::verbs
