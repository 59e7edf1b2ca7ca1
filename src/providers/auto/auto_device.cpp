// SPDX-License-Identifier: MIT
#include "providers/auto/auto_device.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "driver/address_bundle.hpp"
#include "driver/completion_queue.hpp"
#include "driver/work_request.hpp"
#include "services/log.hpp"
#include "services/mutex.hpp"

namespace rdmx::autosel {
namespace {

class AutoDevice;

class AutoQp final : public QueuePair {
 public:
  // `parts`: the PD and CQs it counts among their children (its `subs` hold them too).
  AutoQp(AutoDevice& device, std::vector<std::unique_ptr<QueuePair>> subs, const core::QpParts& parts,
         std::uint32_t qpn)
      : holds_(parts.holds), device_(device), subs_(std::move(subs)), recv_cq_(parts.recv_cq), qpn_(qpn) {}

  std::uint32_t qp_num() const noexcept override { return qpn_; }
  QpState state() const noexcept override {
    if (QueuePair* q = chosen()) return q->state();
    core::LockGuard lock(mutex_);
    if (QueuePair* q = chosen()) return q->state();
    return state_;
  }
  QpCaps caps() const noexcept override {
    // connect() drops the candidates it did not choose, the first among them perhaps.
    if (QueuePair* q = chosen()) return q->caps();
    core::LockGuard lock(mutex_);
    if (QueuePair* q = chosen()) return q->caps();
    return subs_.front()->caps();
  }
  DeviceCaps device_caps() const override;
  std::string provider() const override {
    core::LockGuard lock(mutex_);
    if (QueuePair* q = chosen()) return q->provider();
    return "auto";
  }
  std::string error_reason() const override {
    core::LockGuard lock(mutex_);
    if (QueuePair* q = chosen()) return q->error_reason();
    return error_reason_;
  }
  QpAddress local_address() const override {
    core::LockGuard lock(mutex_);
    if (QueuePair* q = chosen()) return q->local_address();
    std::vector<QpAddress> parts;
    for (const auto& q : subs_) parts.push_back(q->local_address());
    return core::bundle_addresses(parts);
  }
  void init() override {
    core::LockGuard lock(mutex_);
    if (QueuePair* q = chosen()) return q->init();
    for (auto& q : subs_) q->init();
    if (state_ == QpState::Reset) state_ = QpState::Init;
  }
  void connect(const QpAddress& remote, const ConnectOptions& options) override;
  void set_error(const std::string& reason) override {
    core::LockGuard lock(mutex_);
    if (QueuePair* q = chosen()) return q->set_error(reason);
    if (state_ == QpState::Error) return;
    state_ = QpState::Error;
    error_reason_ = "set_error: " + reason;
    for (const auto& r : pending_recvs_) flush_recv(r.wr_id);
    pending_recvs_.clear();
  }
  void post_send(const SendWr& wr) override {
    QueuePair* q = chosen();
    if (q == nullptr) {
      throw Error(ErrorCode::InvalidState, "post_send needs RTS, the QP is not connected yet",
                  {.op = std::string("post_send ") + to_string(wr.opcode), .hint = "call connect() first"});
    }
    q->post_send(wr);
  }
  PostResult try_post_send(const SendWr& wr) override {
    QueuePair* q = chosen();
    if (q == nullptr) {
      post_send(wr);  // throws InvalidState
      return PostResult::Ok;
    }
    return q->try_post_send(wr);
  }
  void post_send_batch(std::span<const SendWr> wrs) override {
    QueuePair* q = chosen();
    if (q == nullptr) return QueuePair::post_send_batch(wrs);  // throws InvalidState for the first
    q->post_send_batch(wrs);
  }
  void post_recv(const RecvWr& wr) override;

 private:
  struct PendingRecv {
    std::uint64_t wr_id;
    std::vector<Sge> sges;
  };
  void flush_recv(std::uint64_t wr_id) {
    WorkCompletion wc;
    wc.wr_id = wr_id;
    wc.status = WcStatus::WrFlushErr;
    wc.opcode = WcOpcode::Recv;
    wc.qp_num = qpn_;
    recv_cq_.push(wc);
  }

  core::QpHolds holds_;  // first: the device, PD and CQs outlive everything below
  AutoDevice& device_;
  mutable core::Mutex mutex_;
  // One per candidate until connect().
  std::vector<std::unique_ptr<QueuePair>> subs_ RDMX_GUARDED_BY(mutex_);
  // Set once, at connect(), under mutex_; read without it on the posting path.
  std::atomic<QueuePair*> chosen_{nullptr};
  QueuePair* chosen() const noexcept { return chosen_.load(std::memory_order_acquire); }
  core::CompletionRing& recv_cq_;
  const std::uint32_t qpn_;
  QpState state_ RDMX_GUARDED_BY(mutex_) = QpState::Reset;
  std::string error_reason_ RDMX_GUARDED_BY(mutex_);
  std::vector<PendingRecv> pending_recvs_ RDMX_GUARDED_BY(mutex_);  // posted before the provider was chosen
};

class AutoDevice final : public Device, public core::EngineHandoff, public std::enable_shared_from_this<AutoDevice> {
 public:
  AutoDevice(std::vector<Candidate> candidates, core::DeviceResources resources, std::string why)
      : candidates_(std::move(candidates)), resources_(std::move(resources)) {
    name_ = "auto[";
    why_ = why + "; per peer: ";
    for (std::size_t i = 0; i < candidates_.size(); ++i) {
      name_ += (i ? "," : "") + candidates_[i].device->name();
      why_ += (i ? ", else " : "") + candidates_[i].name + " (" + candidates_[i].device->selection_reason() + ")";
    }
    name_ += "]";
  }

  std::string provider() const override { return "auto"; }
  std::string name() const override { return name_; }
  std::string selection_reason() const override { return why_; }
  DeviceCaps caps() const override {
    DeviceCaps caps = candidates_.front().device->caps();
    for (const auto& c : candidates_) {
      DeviceCaps d = c.device->caps();
      caps.remote_peers = caps.remote_peers || d.remote_peers;
      caps.same_host_peers = caps.same_host_peers || d.same_host_peers;
      caps.auto_progress = caps.auto_progress && d.auto_progress;
      caps.ordered_write_placement = caps.ordered_write_placement && d.ordered_write_placement;
      caps.registration_pins_memory = caps.registration_pins_memory || d.registration_pins_memory;
      caps.writes_wake_waiters = caps.writes_wake_waiters && d.writes_wake_waiters;
      caps.direct_registered_writes = caps.direct_registered_writes && d.direct_registered_writes;
      caps.max_msg_size = std::min(caps.max_msg_size, d.max_msg_size);
      caps.max_qp_wr = std::min(caps.max_qp_wr, d.max_qp_wr);
      caps.max_sge = std::min(caps.max_sge, d.max_sge);
      caps.max_inline_data = std::min(caps.max_inline_data, d.max_inline_data);
      // A region may travel over any candidate: served as well as the least of them serves it.
      caps.cuda_memory = std::min(caps.cuda_memory, d.cuda_memory);
      caps.latency_us = std::max(caps.latency_us, d.latency_us);
      caps.bandwidth_gbps = std::min(caps.bandwidth_gbps, d.bandwidth_gbps);
      caps.same_host_connection_memory = std::max(caps.same_host_connection_memory, d.same_host_connection_memory);
    }
    return caps;
  }
  std::unique_ptr<ProtectionDomain> alloc_pd() override {
    // Device regions are made shareable when a candidate maps them in peers (shm).
    bool share = false;
    for (const auto& c : candidates_) share = share || c.device->caps().cuda_memory == CudaMemorySupport::PeerMapping;
    const DeviceCaps all = caps();
    return core::make_device_pd(std::make_shared<core::RegistryProtectionDomain>(
        hold(core::ChildKind::ProtectionDomain), *resources_.registry, provider(), all.cuda_memory, share,
        all.writes_wake_waiters ? this : nullptr));
  }
  std::unique_ptr<CompletionQueue> create_cq(std::size_t depth) override {
    return core::make_device_cq(depth, *this, *this, hold(core::ChildKind::CompletionQueue));
  }
  LiveChildren live_children() const override { return children_.live(); }
  std::unique_ptr<QueuePair> create_qp(ProtectionDomain& pd, CompletionQueue& send_cq, CompletionQueue& recv_cq,
                                       const QpCaps& caps) override {
    // Counted here, once; the candidates' QPs under the pin hold without counting.
    auto parts = core::check_qp_parts(pd, send_cq, recv_cq, *resources_.registry, hold(core::ChildKind::QueuePair));
    const std::uint32_t qpn = resources_.next_qpn();
    core::QpNumberPin pin(qpn);
    std::vector<std::unique_ptr<QueuePair>> subs;
    for (auto& c : candidates_) subs.push_back(c.device->create_qp(pd, send_cq, recv_cq, caps));
    return std::make_unique<AutoQp>(*this, std::move(subs), parts, qpn);
  }
  using Device::create_qp;
  std::size_t progress() override {
    std::size_t did = 0;
    for (auto& c : candidates_) did += c.device->progress();
    return did;
  }

  const std::vector<Candidate>& candidates() const { return candidates_; }

 private:
  void application_idle() override {
    for (auto& c : candidates_) {
      if (auto* handoff = dynamic_cast<core::EngineHandoff*>(c.device.get())) handoff->application_idle();
    }
  }

  // A child's hold on this device (driver/lifetime.hpp).
  core::ParentHold hold(core::ChildKind kind) { return core::hold_device(weak_from_this().lock(), children_, kind); }

  std::vector<Candidate> candidates_;
  core::DeviceResources resources_;
  std::string name_;
  std::string why_;
  core::Children children_;
};

DeviceCaps AutoQp::device_caps() const {
  if (QueuePair* q = chosen()) return q->device_caps();
  core::LockGuard lock(mutex_);
  if (QueuePair* q = chosen()) return q->device_caps();
  return device_.caps();
}

void AutoQp::connect(const QpAddress& remote, const ConnectOptions& options) {
  const std::vector<QpAddress> parts = core::unbundle_addresses(remote);
  const auto& candidates = device_.candidates();
  core::UniqueLock lock(mutex_);
  if (chosen() != nullptr || state_ == QpState::Error) {
    throw Error(ErrorCode::InvalidState, "connect() needs a QP in INIT",
                {.op = "connect", .peer_rank = options.peer_rank, .hint = "create a new QP for a new connection"});
  }
  // Both sides walk the candidates in the same order and apply the same test
  // to the same pair of addresses, so they choose alike.
  std::size_t pick = candidates.size();
  const QpAddress* peer = nullptr;
  std::string why;
  std::string refused;
  for (std::size_t i = 0; i < candidates.size() && pick == candidates.size(); ++i) {
    for (const auto& part : parts) {
      if (!candidates[i].owns(part)) continue;
      std::string reason;
      if (candidates[i].reaches(part, &reason)) {
        pick = i;
        peer = &part;
        why = reason;
      } else {
        refused += (refused.empty() ? "" : "; ") + candidates[i].name + ": " + reason;
      }
      break;
    }
  }
  const std::string who = options.peer_rank >= 0 ? "rank " + std::to_string(options.peer_rank) : "the peer";
  if (pick == candidates.size()) {
    throw Error(ErrorCode::InvalidArgument, "no provider of this process can reach " + who,
                {.op = "connect",
                 .peer_rank = options.peer_rank,
                 .hint = (refused.empty() ? "the peer offers no provider built here" : refused) +
                         "; both sides must run the same rdmx build (RDMX_PROVIDER must match)"});
  }
  RDMX_INFO("auto qp %u: %s via %s: %s%s%s", qpn_, who.c_str(), candidates[pick].name.c_str(), why.c_str(),
            refused.empty() ? "" : "; not ", refused.c_str());
  chosen_.store(subs_[pick].get(), std::memory_order_release);
  for (std::size_t i = 0; i < subs_.size(); ++i) {
    if (i != pick) subs_[i].reset();
  }
  std::vector<PendingRecv> recvs;
  recvs.swap(pending_recvs_);
  QueuePair* q = chosen();
  lock.unlock();
  for (const auto& r : recvs) q->post_recv(RecvWr{.wr_id = r.wr_id, .sg_list = r.sges});
  q->connect(*peer, options);
}

void AutoQp::post_recv(const RecvWr& wr) {
  if (QueuePair* q = chosen()) return q->post_recv(wr);
  core::UniqueLock lock(mutex_);
  if (QueuePair* q = chosen()) {  // connect() chose while we waited for the lock
    lock.unlock();
    return q->post_recv(wr);
  }
  const QpCaps c = subs_.front()->caps();
  core::validate_recv_wr(
      wr, c, [](const void*, const std::string& op) { return ErrorContext{.op = op}; }, this);
  if (state_ == QpState::Reset) {
    throw Error(ErrorCode::InvalidState, "post_recv needs INIT or later, the QP is in RESET",
                {.op = "post_recv", .hint = "call init() or connect() first"});
  }
  if (state_ == QpState::Error) return flush_recv(wr.wr_id);
  if (pending_recvs_.size() >= c.max_recv_wr) {
    throw Error(ErrorCode::QueueFull, "receive queue full",
                {.op = "post_recv",
                 .sizes = "max_recv_wr=" + std::to_string(c.max_recv_wr),
                 .hint = "poll the receive CQ before posting more"});
  }
  pending_recvs_.push_back({wr.wr_id, std::vector<Sge>(wr.sg_list.begin(), wr.sg_list.end())});
}

}  // namespace

std::shared_ptr<Device> open_auto_device(std::vector<Candidate> candidates, core::DeviceResources resources,
                                         std::string why) {
  return std::make_shared<AutoDevice>(std::move(candidates), std::move(resources), std::move(why));
}

}  // namespace rdmx::autosel
