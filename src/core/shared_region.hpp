// SPDX-License-Identifier: MIT
// Regions that peers on this host reach directly (SharedRegion): memory
// from allocate_memory(), which peers map, and device memory made
// shareable, which peers open through CUDA IPC (DeviceCaps::cuda_memory:
// peer-mapping). Both carry a state page that tells peers whether the region
// is still registered and lets deregistration wait for their copies.
#pragma once

#include <cstddef>
#include <memory>

#include "core/cuda/pointer.hpp"
#include "core/memory_registry.hpp"

namespace rdmx::core {

// A state page in a memfd of its own, mapped here; nullptr in *state and a
// thrown Error(System) when the memfd cannot be made.
struct StatePage {
  int memfd = -1;
  SharedRegionState* state = nullptr;
};

// Device memory `info` (classify()) made shareable: its allocation exported
// for peers (cuMemCreate memory with the POSIX descriptor handle type) and
// a state page of its own. Null when it cannot be shared, with the reason
// logged at INFO: the region then travels by staging, as on tcp. cudaMalloc
// memory is not shared: a legacy handle's importer must close it before
// the exporter frees the memory, which deregistration does not wait for
// yet (docs/GPU.md).
std::unique_ptr<SharedRegion> share_device_memory(const cuda::PointerInfo& info, const void* addr,
                                                  SharedRegionState** state);

// Deregistration's half: marks the region gone, then waits (bounded by
// RDMX_TIMEOUT) until no peer is inside a direct copy of it.
void retire_shared(const SharedRegion& shared, SharedRegionState* state) noexcept;

// Unmaps a device region's state page and closes its descriptors (after retire_shared).
void release_device_share(SharedRegion& shared, SharedRegionState* state) noexcept;

}  // namespace rdmx::core
