// SPDX-License-Identifier: MIT
// A QP address that carries one address per provider (what an auto device's
// QP publishes), so that a peer using any one of those providers can connect
// to it: [magic 'A', version, count] then per part [u16 length, bytes].
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "rdmx/verbs.hpp"

namespace rdmx::core {

QpAddress bundle_addresses(const std::vector<QpAddress>& parts);
// The parts of a bundle; any other address is its own single part. Throws
// InvalidArgument for a malformed bundle.
std::vector<QpAddress> unbundle_addresses(const QpAddress& address);
// The first part for which `mine` holds, or the address itself when none does
// (so the provider's own decoder reports what is wrong with it).
QpAddress part_for_provider(const QpAddress& address, const std::function<bool(const QpAddress&)>& mine);

}  // namespace rdmx::core
