// Entry point of the shm provider for the provider registry.
#pragma once

#include <memory>
#include <string>

#include "core/memory_registry.hpp"
#include "rdmx/verbs.hpp"

namespace rdmx::shm {
// `registry` is shared with other devices of this process when given (auto selection).
std::shared_ptr<Device> open_shm_device(const std::string& why,
                                        std::shared_ptr<core::MemoryRegistry> registry = nullptr);
}
