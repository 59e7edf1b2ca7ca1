// SPDX-License-Identifier: MIT
// A shm QP's side of core::OfferLink: how deregistration of legacy-handle
// device memory reaches the peers it was offered to. It asks through the
// QP's ring (a Revoke record, which the peer handles in any pass, its
// application's progress calls included, and answers by dropping the
// region and closing its import) and learns from a pidfd that a peer's
// process exited, since a dead process leaves its `holding` word set but
// its imports closed.
#pragma once

#include <cstdint>
#include <string>

#include "driver/device_lock.hpp"
#include "driver/shared_region.hpp"
#include "services/thread_annotations.hpp"

namespace rdmx::shm {

class ShmQp;

class ShmOfferLink final : public core::OfferLink {
 public:
  // `qp` is guarded by `lock`, its device's lock.
  ShmOfferLink(core::DeviceLock& lock, ShmQp* qp, int peer_pid, std::string peer);
  ~ShmOfferLink() override;

  bool ask_to_close(std::uint32_t rkey) noexcept override;
  bool peer_exited() const noexcept override;
  std::string describe() const override { return peer_; }

  // The QP's connection is over (the peer drops what it mapped when it sees
  // that) or the QP goes: nothing is asked through it after this. The QP
  // calls it holding its device's lock, which the analysis knows by another
  // name (the QP's state).
  void detach_locked() RDMX_NO_THREAD_SAFETY_ANALYSIS { qp_ = nullptr; }

 private:
  core::DeviceLock& lock_;
  ShmQp* qp_ RDMX_GUARDED_BY(lock_);
  int pidfd_ = -1;  // -1 where pidfd_open is missing: then only the connection's end tells
  const std::string peer_;
};

}  // namespace rdmx::shm
