// SPDX-License-Identifier: MIT
// The verbs provider's device: one RDMA device and port opened through
// libibverbs, the GID it addresses peers with, the hardware side of every
// protection domain and region (as the registry's RegionBinder), and the
// engine that turns hardware completions into rdmx completions.
//
// Completions: every QP has its own hardware CQ, sized for everything its
// queues can hold, so the hardware CQ never overflows; whoever drives
// progress (an application thread polling or waiting, or the engine thread)
// moves its entries into the rdmx CQs the QP was created with. The engine
// parks while an application thread drives progress (core::EngineParking),
// so a thread that polls pays no interrupt per completion; otherwise it asks
// the hardware for completion events and sleeps on the completion channel,
// so completions reach the CQs, and overflow is seen, with nobody polling.
#pragma once

#include <infiniband/verbs.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "driver/device_resources.hpp"
#include "driver/engine_parking.hpp"
#include "driver/memory_registry.hpp"
#include "providers/verbs/address.hpp"
#include "rdmx/verbs.hpp"
#include "services/mutex.hpp"

namespace rdmx::verbs {

class VerbsQp;

// What the provider chose to use, and why.
struct PortChoice {
  std::string device;  // "mlx5_0"
  int port = 1;
  LinkLayer link_layer = LinkLayer::InfiniBand;
  int gid_index = -1;  // -1: no GRH (InfiniBand without RDMX_IB_GID_INDEX)
  std::array<std::uint8_t, 16> gid{};
  GidType gid_type = GidType::Ib;
  std::uint16_t lid = 0;
  ibv_mtu active_mtu = IBV_MTU_1024;
  std::uint64_t max_msg_size = 0;  // the port's largest message
  std::string why;
};

// "No such device (errno 19)": libibverbs calls report errno.
std::string errno_text(int err);

// The opened device context, shared by the device and the regions it registered.
using ContextHandle = std::shared_ptr<ibv_context>;

class VerbsDevice final : public Device, public core::EngineHandoff, public std::enable_shared_from_this<VerbsDevice> {
 public:
  // `attr`: the device's attributes, as read when the port was chosen.
  VerbsDevice(ContextHandle context, const ibv_device_attr& attr, PortChoice port, std::string why,
              core::DeviceResources resources);
  ~VerbsDevice() override;

  std::string provider() const override { return "verbs"; }
  std::string name() const override { return name_; }
  std::string selection_reason() const override { return why_; }
  DeviceCaps caps() const override { return caps_; }
  LiveChildren live_children() const override { return children_.live(); }
  std::unique_ptr<ProtectionDomain> alloc_pd() override;
  std::unique_ptr<CompletionQueue> create_cq(std::size_t depth) override;
  std::unique_ptr<QueuePair> create_qp(ProtectionDomain& pd, CompletionQueue& send_cq, CompletionQueue& recv_cq,
                                       const QpCaps& caps) override;
  using Device::create_qp;
  std::size_t progress() override;
  void application_idle() override { parking_.application_idle(); }

  // ---- for QPs ----
  ibv_context* context() const { return context_.get(); }
  ibv_comp_channel* channel() const { return channel_; }
  const PortChoice& port() const { return port_; }
  const ibv_device_attr& attr() const { return attr_; }
  // READ/atomic requests a QP answers at once, as the address advertises it.
  std::uint8_t responder_resources() const { return static_cast<std::uint8_t>(std::min(attr_.max_qp_rd_atom, 255)); }
  std::uint32_t inline_limit() const { return inline_limit_; }
  std::uint64_t port_max_message() const { return port_.max_msg_size; }
  std::uint32_t next_qpn() { return resources_.next_qpn(); }
  core::MemoryRegistry& registry() { return *resources_.registry; }
  void add_qp(VerbsQp* qp);
  void remove_qp(VerbsQp* qp);  // after it returns, no thread drains `qp`

 private:
  void engine_main();
  void arm_and_drain_all_locked() RDMX_REQUIRES(mutex_);
  // A child's hold on this device (driver/lifetime.hpp).
  core::ParentHold hold(core::ChildKind kind) { return core::hold_device(weak_from_this().lock(), children_, kind); }

  ContextHandle context_;
  PortChoice port_;
  std::string name_;
  std::string why_;
  core::DeviceResources resources_;
  ibv_device_attr attr_{};
  DeviceCaps caps_;
  std::uint32_t inline_limit_ = 0;

  ibv_comp_channel* channel_ = nullptr;
  int wake_fd_ = -1;
  core::Mutex mutex_;  // the QP list; held while draining
  std::vector<VerbsQp*> qps_ RDMX_GUARDED_BY(mutex_);
  core::EngineParking parking_;
  std::atomic<bool> stopping_{false};
  std::thread engine_;
  core::Children children_;
};

// The hardware side of protection domains and regions (see driver/region_binder.hpp).
class VerbsBinder final : public core::RegionBinder {
 public:
  VerbsBinder(ContextHandle context, std::string device) : context_(std::move(context)), device_(std::move(device)) {}
  std::unique_ptr<Domain> open_domain() override;
  std::unique_ptr<Binding> bind(Domain& domain, void* addr, std::size_t length, Access access, MemoryType memory,
                                int gpu) override;
  // The ibv_pd behind a protection domain of this binder.
  static ibv_pd* pd_of(const Domain& domain);
  // Whether the NIC takes dma-buf regions (GPU memory registered directly),
  // and how rdmx info should say it.
  std::string probe_dma_buf(bool* supported);

 private:
  std::unique_ptr<Binding> bind_device_memory(ibv_pd* pd, void* addr, std::size_t length, Access access, int gpu);

  ContextHandle context_;
  std::string device_;
};

// libibverbs access flags for rdmx rights.
int access_flags(Access access);

}  // namespace rdmx::verbs
