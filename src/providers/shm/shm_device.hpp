// SPDX-License-Identifier: MIT
// The shm provider's device: a listening Unix socket through which peers on
// this host hand over the shared segments of their QP connections, the memory
// registry, and the progress engine.
//
// Progress (core::SoftRcDevice): a pass polls every QP's inbound ring. Before
// the engine blocks it marks each ring "sleeping"; a producer that sees the
// mark writes one byte to the QP's socket to wake it.
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

#include "providers/shm/copy.hpp"
#include "providers/shm/handshake.hpp"
#include "providers/soft_rc/device.hpp"
#include "rdmx/verbs.hpp"
#include "services/thread_annotations.hpp"

namespace rdmx::shm {

class ShmQp;

using core::Watch;
using core::watch_tag;

// RDMX_SHM_EAGER_LIMIT: messages up to this size travel through the rings;
// larger ones are copied once between the two processes' buffers.
std::size_t eager_limit();
// RDMX_SHM_HEAP_DIRECT_MIN: the smallest WRITE or READ into a peer's heap memory copied across processes (0: none is).
std::size_t heap_direct_min();

class ShmDevice final : public core::SoftRcDevice {
 public:
  ShmDevice(std::string why, core::DeviceResources resources);
  ~ShmDevice() override;

  std::size_t progress() override;

  // ---- for QPs ----
  QpAddress qp_address(std::uint32_t qpn) const override;
  bool asymmetric_fence() const { return asymmetric_fence_; }
  // Large direct copies, split over a helper thread (device lock held).
  ParallelCopy& copier() { return copier_; }
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
  Probe* claim_probe_locked() RDMX_REQUIRES(lock_);
  void release_probe_locked(Probe* probe) RDMX_REQUIRES(lock_);

 private:
  std::unique_ptr<QueuePair> make_qp(const core::QpParts& parts, const QpCaps& caps) override;
  std::size_t engine_pass_locked(bool idle) override RDMX_REQUIRES(lock_) { return pass_locked(idle); }
  // The HELLO is one SOCK_SEQPACKET message that carries the segment's memfd.
  const char* greet_locked(core::PendingConnection& p) override RDMX_REQUIRES(lock_);
  const char* read_hello_locked(core::PendingConnection& p) override RDMX_REQUIRES(lock_);
  // Marks the rings sleeping, so a producer wakes the engine through the socket.
  bool prepare_sleep() override RDMX_EXCLUDES(lock_);
  void end_sleep() override RDMX_EXCLUDES(lock_);

  std::size_t pass_locked(bool full) RDMX_REQUIRES(lock_);
  // Whether any QP visibly has work; read without the lock.
  bool any_probe_hot() const;
  // Before blocking: marks every ring sleeping; false when one has work after all.
  bool prepare_sleep_locked() RDMX_REQUIRES(lock_);
  void end_sleep_locked() RDMX_REQUIRES(lock_);

  std::string socket_path_;
  bool asymmetric_fence_ = false;
  static constexpr std::size_t kProbes = 256;
  std::array<Probe, kProbes> probes_;
  std::vector<bool> probe_used_ RDMX_GUARDED_BY(lock_) = std::vector<bool>(kProbes, false);
  std::atomic<std::uint32_t> probe_high_{0};    // probes_[0, high) may be in use
  std::atomic<std::uint32_t> unprobed_qps_{0};  // QPs without a probe
  std::uint32_t passes_ RDMX_GUARDED_BY(lock_) = 0;
  ParallelCopy copier_;
};

}  // namespace rdmx::shm
