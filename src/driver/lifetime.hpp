// SPDX-License-Identifier: MIT
// Destruction order, as InfiniBand checks it (ibv_dealloc_pd, ibv_destroy_cq
// and ibv_close_device answer EBUSY while children live): every child holds
// its parent's state, so destroying a parent first is safe (the state goes
// with the last child), and the parent counts its children by kind, so
// rdmx::destroy() can refuse, naming them, as IB does.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "rdmx/verbs.hpp"

namespace rdmx::core {

enum class ChildKind : std::uint8_t { ProtectionDomain, CompletionQueue, QueuePair, MemoryRegion };

// The live children of one device, protection domain or completion queue.
class Children {
 public:
  LiveChildren live() const noexcept;
  void add(ChildKind kind) noexcept { counts_[index(kind)].fetch_add(1, std::memory_order_relaxed); }
  void remove(ChildKind kind) noexcept { counts_[index(kind)].fetch_sub(1, std::memory_order_acq_rel); }

 private:
  static std::size_t index(ChildKind kind) noexcept { return static_cast<std::size_t>(kind); }
  std::array<std::atomic<std::size_t>, 4> counts_{};
};

// A child's hold on its parent: keeps the parent's state (which holds
// `children`) alive, and counted among its children, while the hold lives.
// `counted` false keeps it alive only (the per-provider QPs under one auto
// QP, which the auto QP counts once).
class ParentHold {
 public:
  ParentHold() = default;
  ParentHold(std::shared_ptr<const void> state, Children& children, ChildKind kind, bool counted = true)
      : children_(std::move(state), &children), kind_(kind), counted_(counted) {
    if (counted_) children_->add(kind_);
  }
  ParentHold(const ParentHold& other) : children_(other.children_), kind_(other.kind_), counted_(other.counted_) {
    if (children_ && counted_) children_->add(kind_);
  }
  ParentHold(ParentHold&& other) noexcept
      : children_(std::move(other.children_)), kind_(other.kind_), counted_(other.counted_) {}
  ParentHold& operator=(ParentHold other) noexcept {
    std::swap(children_, other.children_);
    std::swap(kind_, other.kind_);
    std::swap(counted_, other.counted_);
    return *this;
  }
  ~ParentHold() {
    if (children_ && counted_) children_->remove(kind_);
  }

 private:
  // Aliases the parent's state: the count is dropped before the state.
  std::shared_ptr<Children> children_;
  ChildKind kind_ = ChildKind::QueuePair;
  bool counted_ = false;
};

// Warns that `what` is destroyed while `children` live (their state stays
// until the last of them goes).
void warn_destroyed_with_children(const char* what, const Children& children);

}  // namespace rdmx::core
