// SPDX-License-Identifier: MIT
// Entry point of the verbs provider for the provider registry.
#pragma once

#include <memory>
#include <string>

#include "driver/device_resources.hpp"
#include "driver/provider.hpp"
#include "rdmx/verbs.hpp"

namespace rdmx::verbs {
// Opens the RDMA device RDMX_IB_HCA / RDMX_IB_GID_INDEX select (the first
// device with an active port by default). Throws NotFound with the reason
// when there is none, Config when the settings name nothing usable.
std::shared_ptr<Device> open_verbs_device(const std::string& why, core::DeviceResources resources = {});
bool is_verbs_address(const QpAddress& address);
// For auto selection: whether this process's verbs device can reach `address`.
bool reaches(const Device& device, const QpAddress& address, std::string* why);
}  // namespace rdmx::verbs

namespace rdmx::core {
// This provider's descriptor (descriptor.cpp).
extern const ProviderDescriptor provider_verbs;
}  // namespace rdmx::core
