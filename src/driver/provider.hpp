// SPDX-License-Identifier: MIT
// The provider interface, apart from the user API (include/rdmx/verbs.hpp),
// as rdma-core keeps driver.h apart from verbs.h. A provider is seen by the
// rest of the library only through the one descriptor it exports; the
// registry (src/api) gets the list from the build (cmake/layers.cmake) and
// names none of them. A provider that was not built exports a descriptor
// from its folder's stub.cpp that says why.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "driver/device_resources.hpp"
#include "rdmx/verbs.hpp"

namespace rdmx::core {

// What a provider's memory regions derive from: only a provider makes a
// MemoryRegion (its constructor is private to this class) or gives it a
// write doorbell.
class RegionBase : public MemoryRegion {
 protected:
  RegionBase(void* addr, std::size_t length, std::uint32_t lkey, std::uint32_t rkey, Access access,
             MemoryType memory_type = MemoryType::Host, int cuda_device = -1)
      : MemoryRegion(addr, length, lkey, rkey, access, memory_type, cuda_device) {}
  // `doorbell` must live as long as the region.
  void set_write_doorbell(const Doorbell* doorbell) noexcept { MemoryRegion::write_doorbell_ = doorbell; }
};

// What a provider says of its links before any device opens: the cost
// model's figures where nothing was measured, and what `rdmx info` shows.
struct ProviderFigures {
  double latency_us = 0;                        // one small message, one way
  double bandwidth_gbps = 0;                    // GB/s (1e9 bytes) of one large transfer
  const char* basis = "";                       // where the figures come from
  std::size_t same_host_connection_memory = 0;  // host memory one connection to a local peer maps
};

struct ProviderDescriptor {
  const char* name;  // "tcp": what RDMX_PROVIDER and open_device() take
  // False for a stub: the provider is not in this library, and not_built()
  // says why (and what the host has that it could use).
  bool built;
  std::string (*not_built)();
  // Auto selection goes on without a provider that cannot open here (no
  // hardware), saying why; the others must open.
  bool optional;
  // Opens a device over `resources`; `why` is the reason it was chosen, for selection_reason().
  std::shared_ptr<Device> (*open)(const std::string& why, DeviceResources resources);
  // The address codec's question for auto selection: is this QP address
  // this provider's (a bundle carries one part per provider).
  bool (*owns)(const QpAddress& address);
  // Whether `device` reaches the peer at `address`, and why (or why not).
  bool (*reaches)(const Device& device, const QpAddress& address, std::string* why);
  // Removes what processes that died without closing their devices left on this host; returns how many.
  std::size_t (*remove_stale)();
  ProviderFigures figures;
};

// The descriptors built into this library, in auto selection's order (the
// first that reaches a peer carries its QPs). Defined by the file the build
// generates from cmake/layers.cmake's provider list.
std::span<const ProviderDescriptor* const> provider_descriptors();

}  // namespace rdmx::core
