// SPDX-License-Identifier: MIT
// Entry point of the tcp provider for the provider registry.
#pragma once

#include <memory>
#include <string>

#include "driver/device_resources.hpp"
#include "driver/provider.hpp"
#include "rdmx/verbs.hpp"

namespace rdmx::tcp {
// `resources` are shared with other devices of this process (auto selection).
// Whether `address` is a tcp QP address.
bool is_tcp_address(const QpAddress& address);
std::shared_ptr<Device> open_tcp_device(const std::string& why, core::DeviceResources resources = {});
}  // namespace rdmx::tcp

namespace rdmx::core {
// This provider's descriptor (descriptor.cpp).
extern const ProviderDescriptor provider_tcp;
}  // namespace rdmx::core
