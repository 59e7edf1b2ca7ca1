// Entry point of the tcp provider for the provider registry.
#pragma once

#include <memory>
#include <string>

#include "rdmx/verbs.hpp"

namespace rdmx::tcp {
std::shared_ptr<Device> open_tcp_device(const std::string& why);
}
