// SPDX-License-Identifier: MIT
// What the shm provider exports to the registry (driver/provider.hpp).
#include "driver/provider.hpp"
#include "providers/shm/address.hpp"
#include "providers/shm/ring.hpp"
#include "providers/shm/shm_factory.hpp"

namespace rdmx::core {

const ProviderDescriptor provider_shm = {
    .name = "shm",
    .built = true,
    .not_built = nullptr,
    .optional = false,
    .open = shm::open_shm_device,
    .owns = shm::ShmAddress::is_shm,
    .reaches = [](const Device&, const QpAddress& address,
                  std::string* why) { return shm::reachable(shm::ShmAddress::decode(address), why); },
    .remove_stale = shm::remove_stale_shm_sockets,
    // A copy between two processes' mappings: what one core copies.
    .figures = {.latency_us = 0.2,
                .bandwidth_gbps = 20,
                .basis = "declared: one core's memory copy",
                .same_host_connection_memory = shm::segment_size(shm::kRingSlots)},
};

}  // namespace rdmx::core
