// SPDX-License-Identifier: MIT
// What the tcp provider exports to the registry (driver/provider.hpp).
#include "driver/provider.hpp"
#include "providers/tcp/tcp_factory.hpp"

namespace rdmx::core {

const ProviderDescriptor provider_tcp = {
    .name = "tcp",
    .built = true,
    .not_built = nullptr,
    .optional = false,
    .open = tcp::open_tcp_device,
    .owns = tcp::is_tcp_address,
    .reaches =
        [](const Device&, const QpAddress&, std::string* why) {
          *why = "tcp reaches processes on any host";
          return true;
        },
    .remove_stale = nullptr,
    // Across hosts the link's rate caps the bandwidth; the device reports it
    // where the interface says (DeviceCaps::bandwidth_gbps).
    .figures = {.latency_us = 25, .bandwidth_gbps = 1.25, .basis = "declared: a 10 GbE link through the kernel's TCP"},
};

}  // namespace rdmx::core
