// SPDX-License-Identifier: MIT
#include "driver/lifetime.hpp"

#include "services/log.hpp"

namespace rdmx {
namespace {

void add_count(std::string& out, std::size_t n, const char* one, const char* many) {
  if (n == 0) return;
  if (!out.empty()) out += ", ";
  out += std::to_string(n) + " " + (n == 1 ? one : many);
}

// Throws InvalidState naming `children`, which keep `what` from being destroyed.
void refuse_if_busy(const char* what, const LiveChildren& children, const char* hint) {
  if (children.empty()) return;
  throw Error(ErrorCode::InvalidState,
              std::string("cannot destroy the ") + what + " while " + children.to_string() + " of it still live",
              {.op = std::string("destroy ") + what, .hint = hint});
}

}  // namespace

std::string LiveChildren::to_string() const {
  std::string out;
  add_count(out, protection_domains, "protection domain", "protection domains");
  add_count(out, completion_queues, "completion queue", "completion queues");
  add_count(out, queue_pairs, "queue pair", "queue pairs");
  add_count(out, memory_regions, "memory region", "memory regions");
  return out.empty() ? "none" : out;
}

void destroy(std::unique_ptr<ProtectionDomain>& pd) {
  if (pd) {
    refuse_if_busy("protection domain", pd->live_children(),
                   "destroy its memory regions and queue pairs first (ibv_dealloc_pd answers EBUSY here)");
  }
  pd.reset();
}

void destroy(std::unique_ptr<CompletionQueue>& cq) {
  if (cq) {
    refuse_if_busy("completion queue", cq->live_children(),
                   "destroy the queue pairs that complete into it first (ibv_destroy_cq answers EBUSY here)");
  }
  cq.reset();
}

void destroy(std::shared_ptr<Device>& device) {
  if (device) {
    refuse_if_busy("device", device->live_children(),
                   "destroy its queue pairs, completion queues and protection domains first (ibv_close_device "
                   "answers EBUSY here)");
  }
  device.reset();
}

namespace core {

LiveChildren Children::live() const noexcept {
  auto count = [this](ChildKind kind) { return counts_[index(kind)].load(std::memory_order_acquire); };
  return {.protection_domains = count(ChildKind::ProtectionDomain),
          .completion_queues = count(ChildKind::CompletionQueue),
          .queue_pairs = count(ChildKind::QueuePair),
          .memory_regions = count(ChildKind::MemoryRegion)};
}

void warn_destroyed_with_children(const char* what, const Children& children) {
  const LiveChildren live = children.live();
  if (live.empty()) return;
  RDMX_WARN(
      "%s destroyed while %s of it still live: its resources stay until the last of them is destroyed "
      "(destroy children first; rdmx::destroy() refuses instead, as IB answers EBUSY)",
      what, live.to_string().c_str());
}

}  // namespace core
}  // namespace rdmx
