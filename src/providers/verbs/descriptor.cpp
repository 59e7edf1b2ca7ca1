// SPDX-License-Identifier: MIT
// What the verbs provider exports to the registry (driver/provider.hpp).
#include "driver/provider.hpp"
#include "providers/verbs/verbs_factory.hpp"

namespace rdmx::core {

const ProviderDescriptor provider_verbs = {
    .name = "verbs",
    .built = true,
    .not_built = nullptr,
    // No RDMA device is the common case: auto selection goes on without it.
    .optional = true,
    .open = verbs::open_verbs_device,
    .owns = verbs::is_verbs_address,
    .reaches = verbs::reaches,
    .remove_stale = nullptr,
    // The device reports its port's rate (DeviceCaps::bandwidth_gbps).
    .figures = {.latency_us = 2, .bandwidth_gbps = 12.5, .basis = "declared: a 100 Gb/s HCA port"},
};

}  // namespace rdmx::core
