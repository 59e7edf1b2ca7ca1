// SPDX-License-Identifier: MIT
// The verbs provider's descriptor in a library built without libibverbs:
// it opens nothing and says why, naming the RDMA devices the host has (a
// user who has them wants to know that only the build stands in the way).
#include "driver/provider.hpp"
#include "rdmx/error.hpp"
#include "topo/topo.hpp"

namespace rdmx::core {
namespace {

std::string why_not_built() {
  std::string reason = "not built: libibverbs (libibverbs-dev) was not found when rdmx was configured";
  const topo::RdmaScan rdma = topo::scan_rdma_devices();
  if (rdma.devices.empty()) return reason + "; and " + rdma.note;
  reason += "; RDMA devices present: ";
  for (std::size_t i = 0; i < rdma.devices.size(); ++i) {
    const auto& device = rdma.devices[i];
    reason += (i == 0 ? "" : ", ") + device.name;
    for (const auto& port : device.ports) {
      reason += " (port " + std::to_string(port.number) + " " + port.state + ", " + port.link_layer + ")";
    }
  }
  return reason;
}

}  // namespace

extern const ProviderDescriptor provider_verbs;
const ProviderDescriptor provider_verbs = {
    .name = "verbs",
    .built = false,
    .not_built = why_not_built,
    .optional = true,
    .open = [](const std::string&, DeviceResources) -> std::shared_ptr<Device> {
      throw Error(ErrorCode::NotFound, "provider verbs " + why_not_built(),
                  {.op = "open_device", .hint = "install libibverbs-dev and rebuild rdmx, or use RDMX_PROVIDER=tcp"});
    },
    .owns = [](const QpAddress&) { return false; },
    .reaches =
        [](const Device&, const QpAddress&, std::string* why) {
          *why = "verbs is not built";
          return false;
        },
    .remove_stale = nullptr,
    .figures = {},
};

}  // namespace rdmx::core
