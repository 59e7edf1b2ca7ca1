// SPDX-License-Identifier: MIT
// The shm provider's device: a listening Unix socket through which peers on
// this host hand over the shared segments of their QP connections, the memory
// registry, and the progress engine.
//
// Progress follows the tcp provider's model: whoever holds the device lock
// runs a pass over the QPs' rings, either an application thread (progress(),
// CQ poll/wait) or the background engine thread once no application thread
// drives progress. The engine spins RDMX_SPIN_US after activity, then marks
// each ring "sleeping" and blocks in epoll_wait on the QPs' sockets, where a
// producer that sees the mark writes one byte to wake it.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/device_lock.hpp"
#include "core/device_resources.hpp"
#include "core/engine_parking.hpp"
#include "core/wait.hpp"
#include "providers/shm/copy.hpp"
#include "providers/shm/handshake.hpp"
#include "rdmx/verbs.hpp"

namespace rdmx::shm {

class ShmQp;

// epoll tags: kind in the high 32 bits, id (fd or qpn) in the low ones.
enum class Watch : std::uint32_t { Listener = 1, Pending = 2, Qp = 3, Wake = 4 };
inline std::uint64_t watch_tag(Watch kind, std::uint32_t id) { return (static_cast<std::uint64_t>(kind) << 32) | id; }

// RDMX_SHM_EAGER_LIMIT: messages up to this size travel through the rings;
// larger ones are copied once between the two processes' buffers.
std::size_t eager_limit();

class ShmDevice final : public Device, public core::EngineHandoff {
 public:
  ShmDevice(std::string why, core::DeviceResources resources);
  ~ShmDevice() override;

  std::string provider() const override { return "shm"; }
  std::string name() const override { return name_; }
  std::string selection_reason() const override { return why_; }
  DeviceCaps caps() const override;
  std::unique_ptr<ProtectionDomain> alloc_pd() override;
  std::unique_ptr<CompletionQueue> create_cq(std::size_t depth) override;
  std::unique_ptr<QueuePair> create_qp(ProtectionDomain& pd, CompletionQueue& send_cq, CompletionQueue& recv_cq,
                                       const QpCaps& caps) override;
  using Device::create_qp;
  std::size_t progress() override;

  // ---- for QPs ----
  core::MemoryRegistry& registry() { return *resources_.registry; }
  std::uint64_t nonce() const { return nonce_; }
  const std::string& socket_path() const { return socket_path_; }
  // Guards the device and every QP's state.
  core::DeviceLock& mutex() { return mutex_; }
  int epoll_fd() const { return epoll_fd_; }
  std::uint32_t next_qpn() { return resources_.next_qpn(); }
  bool asymmetric_fence() const { return asymmetric_fence_; }
  // Large direct copies, split over a helper thread (device lock held).
  ParallelCopy& copier() { return copier_; }
  void add_qp_locked(ShmQp* qp);
  void remove_qp_locked(ShmQp* qp);
  // A parked HELLO for this QP from this peer, if one arrived before connect().
  struct PendingHello {
    int socket = -1;
    int memfd = -1;
    Hello hello{};
  };
  bool claim_pending_locked(std::uint32_t qpn, std::uint32_t remote_qpn, std::uint64_t remote_nonce,
                            PendingHello* out);
  // What a progress() call may look at without the device lock: per QP, where
  // its next inbound record will appear and whether it has other work (see
  // ShmQp::update_probe_locked). Probes live as long as the device; a QP's
  // segment is never unmapped while a lock-free reader may still look at it
  // (ShmQp's destructor leaves a zero page in its place).
  struct Probe {
    std::atomic<const std::atomic<std::uint32_t>*> stamp{nullptr};
    std::atomic<std::uint32_t> expect{0};
    std::atomic<std::uint32_t> busy{0};
  };
  // A probe for a new QP, or nullptr when all are taken (then every
  // progress() call takes the lock).
  Probe* claim_probe_locked();
  void release_probe_locked(Probe* probe);

  void note_application_activity() { parking_.note_application_activity(); }
  void application_idle() override { parking_.application_idle(); }

 private:
  struct Pending {
    PendingHello hello;
    bool complete = false;
    core::Clock::time_point accepted_at;
  };
  std::size_t pass_locked(bool full);
  // Whether any QP visibly has work; read without the lock.
  bool any_probe_hot() const;
  std::size_t epoll_pass_locked();
  void accept_all_locked();
  void read_hello_locked(int fd);
  void drop_pending_locked(int fd, const char* why);
  void run_timers_locked(core::Clock::time_point now);
  // Before blocking: marks every ring sleeping; false when one has work after all.
  bool prepare_sleep_locked();
  void end_sleep_locked();
  void engine_main();

  std::string name_;
  std::string why_;
  core::DeviceResources resources_;
  std::string socket_path_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::uint64_t nonce_ = 0;
  bool asymmetric_fence_ = false;

  core::DeviceLock mutex_;
  std::unordered_map<std::uint32_t, ShmQp*> qps_;
  std::vector<ShmQp*> qp_list_;  // the same QPs, for the hot pass
  static constexpr std::size_t kProbes = 256;
  std::array<Probe, kProbes> probes_;
  std::vector<bool> probe_used_ = std::vector<bool>(kProbes, false);
  std::atomic<std::uint32_t> probe_high_{0};   // probes_[0, high) may be in use
  std::atomic<std::uint32_t> unprobed_qps_{0};  // QPs without a probe
  std::unordered_map<int, Pending> pending_;
  core::Clock::time_point next_timer_scan_{};
  std::atomic<bool> timers_busy_{false};
  std::uint32_t passes_ = 0;

  std::atomic<bool> stopping_{false};
  core::EngineParking parking_;
  ParallelCopy copier_;
  std::thread engine_;
};

}  // namespace rdmx::shm
