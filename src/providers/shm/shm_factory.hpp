// SPDX-License-Identifier: MIT
// Entry point of the shm provider for the provider registry.
#pragma once

#include <memory>
#include <string>

#include "driver/device_resources.hpp"
#include "driver/provider.hpp"
#include "rdmx/verbs.hpp"

namespace rdmx::shm {
// `resources` are shared with other devices of this process (auto selection).
std::shared_ptr<Device> open_shm_device(const std::string& why, core::DeviceResources resources = {});
// Removes the socket files of this user's processes that died without
// closing their devices; returns how many.
std::size_t remove_stale_shm_sockets();
}  // namespace rdmx::shm

namespace rdmx::core {
// This provider's descriptor (descriptor.cpp).
extern const ProviderDescriptor provider_shm;
}  // namespace rdmx::core
