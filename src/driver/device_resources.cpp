// SPDX-License-Identifier: MIT
#include "driver/device_resources.hpp"

#include "driver/completion_queue.hpp"

namespace rdmx::core {

QpParts check_qp_parts(ProtectionDomain& pd, CompletionQueue& send_cq, CompletionQueue& recv_cq,
                       const MemoryRegistry& registry) {
  auto* domain = dynamic_cast<RegistryProtectionDomain*>(&pd);
  auto* scq = dynamic_cast<CompletionRing*>(&send_cq);
  auto* rcq = dynamic_cast<CompletionRing*>(&recv_cq);
  if (domain == nullptr || &domain->registry() != &registry || scq == nullptr || rcq == nullptr) {
    throw Error(ErrorCode::InvalidArgument, "protection domain or completion queue belongs to another device",
                {.op = "create_qp", .hint = "create the PD and CQs from the same Device as the QP"});
  }
  return {*domain, *scq, *rcq};
}

std::unique_ptr<CompletionQueue> make_device_cq(std::size_t depth, Device& device, EngineHandoff& handoff) {
  return std::make_unique<CompletionRing>(depth, CompletionRing::Hooks{[&device] { return device.progress(); },
                                                                       [&handoff] { handoff.application_idle(); }});
}

}  // namespace rdmx::core
