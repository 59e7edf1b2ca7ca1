// SPDX-License-Identifier: MIT
// What the devices of the software RC providers (tcp, shm) share: the
// protection domain, CQ and QP plumbing over one memory registry, a
// listening socket whose connections wait (as PendingConnection) until the
// QP their HELLO names takes them, one epoll set, and the progress engine.
//
// Progress: whoever holds the device lock runs a pass: an application thread
// calling progress() (CQ polls and waits do), or the background engine
// thread once no application thread drives progress (core::EngineParking).
// So READ and atomics are served while the target application computes, and
// a thread spinning on completions gets the data itself, without waking
// another thread. The engine spins RDMX_SPIN_US after activity, then blocks
// in epoll_wait until a socket, the wake-up eventfd or a timer needs it.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <cassert>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "driver/device_lock.hpp"
#include "driver/device_resources.hpp"
#include "driver/engine_parking.hpp"
#include "driver/provider.hpp"
#include "providers/soft_rc/connection.hpp"
#include "rdmx/verbs.hpp"
#include "services/mutex.hpp"
#include "services/wait.hpp"

namespace rdmx::core {

class SoftRcQp;

class SoftRcDevice : public Device, public EngineHandoff, public std::enable_shared_from_this<SoftRcDevice> {
 public:
  ~SoftRcDevice() override;

  std::string provider() const final { return provider_; }
  std::string name() const final { return name_; }
  std::string selection_reason() const final { return why_; }
  DeviceCaps caps() const final;
  LiveChildren live_children() const final { return children_.live(); }
  std::unique_ptr<ProtectionDomain> alloc_pd() final;
  std::unique_ptr<CompletionQueue> create_cq(std::size_t depth) final;
  std::unique_ptr<QueuePair> create_qp(ProtectionDomain& pd, CompletionQueue& send_cq, CompletionQueue& recv_cq,
                                       const QpCaps& caps) final;
  using Device::create_qp;
  // The caller is about to sleep: let the background engine take over now.
  void application_idle() final { parking_.application_idle(); }

  // ---- for QPs ----
  // The address a peer connects to this device's QP `qpn` by.
  virtual QpAddress qp_address(std::uint32_t qpn) const = 0;
  MemoryRegistry& registry() { return *resources_.registry; }
  std::uint64_t nonce() const { return nonce_; }
  int epoll_fd() const { return epoll_fd_; }
  std::uint32_t next_qpn() { return resources_.next_qpn(); }
  // Guards the device's tables and the engine's pass.
  DeviceLock& lock() RDMX_RETURN_CAPABILITY(lock_) { return lock_; }
  // Tells the analysis that `held`, the lock a QP's caller holds (the QP's
  // reference to it), is this device's (checked in debug builds).
  void lock_held([[maybe_unused]] const DeviceLock& held) const RDMX_REQUIRES(held) RDMX_ASSERT_CAPABILITY(lock_) {
    assert(&held == &lock_);
  }
  // An application thread is working the device (posting): the background
  // engine stays parked, as it does while the application calls progress().
  void note_application_activity() { parking_.note_application_activity(); }
  // This process ran out of descriptors (or kernel memory) while taking a
  // connection: `what` failed with `error`. Any thread.
  void note_descriptor_shortage(const char* what, int error);
  // For a QP whose connection did not complete: why, when this process ran
  // short of descriptors since `since` (else empty). Any thread.
  std::string descriptor_shortage_since(Clock::time_point since) const;
  // Device lock held.
  void add_qp_locked(SoftRcQp* qp) RDMX_REQUIRES(lock_);
  void remove_qp_locked(SoftRcQp* qp) RDMX_REQUIRES(lock_);
  // A parked connection whose HELLO named this QP and peer, handed over.
  std::optional<PendingConnection> claim_pending_locked(std::uint32_t qpn, std::uint32_t remote_qpn,
                                                        std::uint64_t remote_nonce) RDMX_REQUIRES(lock_);

 protected:
  // `remote_peers`: the transport reaches other hosts (else only this one).
  // `direct_registered_writes`: WRITEs into registered memory are placed by
  // the transport's own receive (DeviceCaps).
  // `cuda_memory`: how the provider's responder serves device memory (the
  // requester's side is core::Staging, the same for every provider).
  // `descriptor` names the provider and declares its figures (DeviceCaps).
  SoftRcDevice(const ProviderDescriptor& descriptor, DeviceResources resources, std::uint64_t max_message,
               bool remote_peers, bool direct_registered_writes, CudaMemorySupport cuda_memory);
  // Watches the provider's listening socket, then starts the engine thread.
  void start(int listen_fd, std::string name, std::string why);
  // Stops the engine thread; the derived destructor calls it first, as the
  // engine calls into the derived device.
  void stop();

  // ---- hooks ----
  virtual std::unique_ptr<QueuePair> make_qp(const QpParts& parts, const QpCaps& caps) = 0;
  // The engine's pass (device lock held); `idle`: nothing happened for a spin budget.
  virtual std::size_t engine_pass_locked(bool idle) RDMX_REQUIRES(lock_) = 0;
  // Before the engine blocks: false when there is work after all. Takes the lock itself.
  virtual bool prepare_sleep() { return true; }
  virtual void end_sleep() {}
  // An epoll event of a kind the base does not handle (Linger).
  virtual bool on_watch_locked(Watch /*kind*/, std::uint32_t /*id*/, std::uint32_t /*events*/) RDMX_REQUIRES(lock_) {
    return false;
  }
  // Right after accept: the source as text (empty when it says nothing).
  virtual std::string accepted_locked(int /*fd*/, const sockaddr_storage& /*from*/) RDMX_REQUIRES(lock_) { return {}; }
  // Right after accept, once `p` exists: what the acceptor says first (tcp:
  // the challenge). Returns null, or why the connection is dropped.
  virtual const char* greet_locked(PendingConnection& /*p*/) RDMX_REQUIRES(lock_) { return nullptr; }
  // Closes a connection this device refused (tcp lets its last words arrive first).
  virtual void close_refused_locked(int fd) RDMX_REQUIRES(lock_);
  // Reads what arrived of the HELLO into `p`; returns null while incomplete
  // and fine, "" once complete and well formed (p.ids filled in), else why
  // the connection is dropped.
  virtual const char* read_hello_locked(PendingConnection& p) RDMX_REQUIRES(lock_) = 0;
  // Timers of the device's own (device lock held); true while they need scanning soon.
  virtual bool device_timers_locked(Clock::time_point /*now*/) RDMX_REQUIRES(lock_) { return false; }

  // ---- for the provider, device lock held ----
  // Handles the ready epoll events; returns how many did work.
  std::size_t epoll_pass_locked() RDMX_REQUIRES(lock_);
  // Runs the timers once a millisecond has passed since the last scan.
  void maybe_run_timers_locked() RDMX_REQUIRES(lock_);

  DeviceLock lock_;
  std::unordered_map<std::uint32_t, SoftRcQp*> qps_ RDMX_GUARDED_BY(lock_);
  std::vector<SoftRcQp*> qp_list_ RDMX_GUARDED_BY(lock_);  // the same QPs, for the hot pass

 private:
  void accept_all_locked() RDMX_REQUIRES(lock_);
  void hello_progress_locked(int fd) RDMX_REQUIRES(lock_);
  void drop_pending_locked(int fd, const char* why) RDMX_REQUIRES(lock_);
  // Makes room for one more pending connection: drops the oldest that has
  // sent no HELLO for a second; false when none has been silent that long.
  bool evict_silent_locked() RDMX_REQUIRES(lock_);
  void engine_main();
  // A child's hold on this device (driver/lifetime.hpp).
  ParentHold hold(ChildKind kind) { return hold_device(weak_from_this().lock(), children_, kind); }

  const char* const provider_;
  const ProviderFigures figures_;
  const std::uint64_t max_message_;
  const bool remote_peers_;
  const bool direct_registered_writes_;
  const CudaMemorySupport cuda_memory_;
  std::string name_;
  std::string why_;
  DeviceResources resources_;
  std::uint64_t nonce_ = 0;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // eventfd that interrupts the engine's epoll_wait

  std::unordered_map<int, PendingConnection> pending_ RDMX_GUARDED_BY(lock_);
  Clock::time_point next_timer_scan_ RDMX_GUARDED_BY(lock_){};
  // Out of descriptors (or kernel memory) to accept with: the listener is
  // not watched until then, so a backlog it cannot take does not spin the engine.
  std::optional<Clock::time_point> accept_paused_until_ RDMX_GUARDED_BY(lock_);
  bool accept_starved_ RDMX_GUARDED_BY(lock_) = false;  // warned; cleared by the next accept
  // The latest descriptor shortage (note_descriptor_shortage).
  mutable Mutex shortage_mutex_;
  Clock::time_point shortage_at_ RDMX_GUARDED_BY(shortage_mutex_){};
  std::string shortage_ RDMX_GUARDED_BY(shortage_mutex_);
  std::atomic<bool> timers_busy_{false};  // read by the engine thread before it blocks, outside the lock

  std::atomic<bool> stopping_{false};
  EngineParking parking_;
  Children children_;
  std::thread engine_;
};

}  // namespace rdmx::core
