// SPDX-License-Identifier: MIT
// What devices of one process share when one protection domain, memory
// region and completion queue must serve QPs of several providers (auto
// selection picks the provider per peer): the region table, so a key means
// the same region whichever provider checks it, and the QP numbers, so a
// completion's qp_num names one QP whichever provider carries it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "driver/lifetime.hpp"
#include "driver/memory_registry.hpp"

namespace rdmx::core {

// While alive, QPs created on this thread take `qpn` instead of a fresh
// number (auto selection creates one QP per candidate provider under one number).
inline thread_local std::uint32_t pinned_qp_number = 0;
class QpNumberPin {
 public:
  explicit QpNumberPin(std::uint32_t qpn) { pinned_qp_number = qpn; }
  ~QpNumberPin() { pinned_qp_number = 0; }
  QpNumberPin(const QpNumberPin&) = delete;
  QpNumberPin& operator=(const QpNumberPin&) = delete;
};

struct DeviceResources {
  std::shared_ptr<MemoryRegistry> registry = std::make_shared<MemoryRegistry>();
  std::shared_ptr<std::atomic<std::uint32_t>> qp_numbers = std::make_shared<std::atomic<std::uint32_t>>(1);
  std::uint32_t next_qpn() const { return pinned_qp_number != 0 ? pinned_qp_number : qp_numbers->fetch_add(1); }
};

// Devices whose background engine steps aside while an application thread
// drives progress; told when that thread is about to sleep, so the engine
// takes over at once. A CQ shared by several devices tells each of them.
class EngineHandoff {
 public:
  virtual ~EngineHandoff() = default;
  virtual void application_idle() = 0;
};

}  // namespace rdmx::core

namespace rdmx::core {

class CompletionRing;
class RegistryProtectionDomain;

// What a QP holds of its parents for as long as it lives: they stay valid
// under it, and count it among their children (driver/lifetime.hpp).
struct QpHolds {
  ParentHold device;
  ParentHold pd;
  ParentHold send_cq;
  ParentHold recv_cq;  // empty when the same CQ serves both
};

// What create_qp() receives, checked to come from a device over `registry`
// (throws InvalidArgument naming the mix-up otherwise), with the holds the
// QP keeps; `device` is the creating device's hold. A QP made while a
// QpNumberPin lives (one provider's part of an auto QP) is not counted:
// the auto QP over it is.
struct QpParts {
  RegistryProtectionDomain& pd;
  CompletionRing& send_cq;
  CompletionRing& recv_cq;
  QpHolds holds;
};
QpParts check_qp_parts(ProtectionDomain& pd, CompletionQueue& send_cq, CompletionQueue& recv_cq,
                       const MemoryRegistry& registry, ParentHold device);

// A child's hold on a device whose children are `children`; `self` is the
// device (null where no shared_ptr owns it). A QP made under a QpNumberPin
// is not counted, as in check_qp_parts().
inline ParentHold hold_device(std::shared_ptr<const void> self, Children& children, ChildKind kind) {
  return ParentHold(std::move(self), children, kind, kind != ChildKind::QueuePair || pinned_qp_number == 0);
}

// A CQ whose waits drive `device` and hand progress to its engine before
// sleeping; `hold` keeps the device alive under it.
std::unique_ptr<CompletionQueue> make_device_cq(std::size_t depth, Device& device, EngineHandoff& handoff,
                                                ParentHold hold);
// The user's ProtectionDomain over `domain` (which its regions and QPs hold too).
std::unique_ptr<ProtectionDomain> make_device_pd(std::shared_ptr<RegistryProtectionDomain> domain);

}  // namespace rdmx::core
