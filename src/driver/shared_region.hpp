// SPDX-License-Identifier: MIT
// Regions that peers on this host reach directly (SharedRegion): memory
// from allocate_memory(), which peers map, and device memory made
// shareable, which peers open through CUDA IPC (DeviceCaps::cuda_memory:
// peer-mapping). Both carry a state page that tells peers whether the region
// is still registered and lets deregistration wait for their copies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "driver/memory_registry.hpp"
#include "services/cuda/pointer.hpp"
#include "services/mutex.hpp"

namespace rdmx::core {

// A state page in a memfd of its own, mapped here.
struct StatePage {
  int memfd = -1;
  SharedRegionState* state = nullptr;
};

// The state page of a registered host region (SharedRegion::heap), made
// under `mutex` by whichever QP offers the region first.
struct HeapStatePage {
  Mutex mutex;
  bool tried RDMX_GUARDED_BY(mutex) = false;
  StatePage page RDMX_GUARDED_BY(mutex);
};

// A heap region's SharedRegion (no page yet).
std::unique_ptr<SharedRegion> share_heap_memory();
// Its state page, made (with `live` set) on the first call; memfd -1 when
// it cannot be made (said once at INFO: peers then keep using the ring).
// Called by the offering provider under its access lock, which
// deregistration waits out before retire_heap_share().
StatePage heap_state_page(const SharedRegion& shared);
// Deregistration's half for a heap region: retire_shared() and unmap the
// page, if one was made.
void retire_heap_share(const SharedRegion& shared) noexcept;

// A connection over which a region of legacy-handle device memory was
// offered, as the offering provider sees it. cudaMalloc memory freed while
// another process has it open through a legacy IPC handle is undefined
// behaviour (cuda.h, cuIpcOpenMemHandle), and a deregistered region may be
// freed next: so deregistration asks each such peer to close its import
// and waits until it has (the slot's `holding` word) or its process is gone.
class OfferLink {
 public:
  virtual ~OfferLink() = default;
  // Asks the peer to close its import behind `rkey`; false when the
  // request cannot be sent yet (it is asked again).
  virtual bool ask_to_close(std::uint32_t rkey) noexcept = 0;
  // The peer's process has exited: whatever it imported was closed with it.
  virtual bool peer_exited() const noexcept = 0;
  // Who the peer is, for messages.
  virtual std::string describe() const = 0;
};

// The offers of one region (SharedRegion::offers), added under the device
// lock by the QPs that offer it and read by deregistration once the region
// has left the registry (so no offer is added after that).
struct RegionOffers {
  struct Offer {
    std::shared_ptr<OfferLink> link;
    std::uint32_t rkey;
    std::uint32_t slot;
  };
  Mutex mutex;
  std::vector<Offer> offers RDMX_GUARDED_BY(mutex);
};

// Device memory `info` (classify()) made shareable: its allocation exported
// for peers (cudaMalloc memory through a legacy IPC handle, with `offers`
// set; cuMemCreate memory with the POSIX descriptor handle type) and a
// state page of its own. Null when it cannot be shared, with the reason
// logged at INFO: the region then travels by staging, as on tcp.
std::unique_ptr<SharedRegion> share_device_memory(const cuda::PointerInfo& info, const void* addr,
                                                  SharedRegionState** state);

// Deregistration's half: marks the region gone, then waits (bounded by
// RDMX_TIMEOUT) until no peer is inside a direct copy of it and, for legacy
// handles, until every peer it was offered to has closed its import.
void retire_shared(const SharedRegion& shared, SharedRegionState* state) noexcept;

// Deregistration's half for memory from allocate_memory(): marks the region
// gone, so that peers stop copying into it and unmap it. A copy already
// started is not waited for: it lands in the peer's own mapping of the
// memfd, which outlives this process's, so nothing reaches memory this
// process uses next, and a peer stopped inside a copy holds nothing up.
void retire_allocated(SharedRegionState* state) noexcept;

// Unmaps a device region's state page and closes its descriptors (after retire_shared).
void release_device_share(SharedRegion& shared, SharedRegionState* state) noexcept;

}  // namespace rdmx::core
