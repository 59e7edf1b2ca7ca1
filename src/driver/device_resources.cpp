// SPDX-License-Identifier: MIT
#include "driver/device_resources.hpp"

#include "driver/completion_queue.hpp"

namespace rdmx::core {

QpParts check_qp_parts(ProtectionDomain& pd, CompletionQueue& send_cq, CompletionQueue& recv_cq,
                       const MemoryRegistry& registry, ParentHold device) {
  auto* handle = dynamic_cast<DomainHandle*>(&pd);
  auto* scq = dynamic_cast<CqHandle*>(&send_cq);
  auto* rcq = dynamic_cast<CqHandle*>(&recv_cq);
  if (handle == nullptr || &handle->domain()->registry() != &registry || scq == nullptr || rcq == nullptr) {
    throw Error(ErrorCode::InvalidArgument, "protection domain or completion queue belongs to another device",
                {.op = "create_qp", .hint = "create the PD and CQs from the same Device as the QP"});
  }
  const bool counted = pinned_qp_number == 0;
  const auto& domain = handle->domain();
  const auto& sring = scq->ring();
  const auto& rring = rcq->ring();
  QpHolds holds{.device = std::move(device),
                .pd = ParentHold(domain, domain->children(), ChildKind::QueuePair, counted),
                .send_cq = ParentHold(sring, sring->children(), ChildKind::QueuePair, counted),
                .recv_cq = {}};
  if (rring != sring) holds.recv_cq = ParentHold(rring, rring->children(), ChildKind::QueuePair, counted);
  return {*domain, *sring, *rring, std::move(holds)};
}

std::unique_ptr<CompletionQueue> make_device_cq(std::size_t depth, Device& device, EngineHandoff& handoff,
                                                ParentHold hold) {
  return std::make_unique<CqHandle>(std::make_shared<CompletionRing>(
      depth, CompletionRing::Hooks{[&device] { return device.progress(); }, [&handoff] { handoff.application_idle(); }},
      std::move(hold)));
}

std::unique_ptr<ProtectionDomain> make_device_pd(std::shared_ptr<RegistryProtectionDomain> domain) {
  return std::make_unique<DomainHandle>(std::move(domain));
}

}  // namespace rdmx::core
