// SPDX-License-Identifier: MIT
// Hooks for tests that attack the tcp provider from outside the API (e.g.
// writing garbage into a QP's socket). Not part of the public API.
#pragma once

#include "rdmx/verbs.hpp"

namespace rdmx::tcp::testing {
// The connected socket of a tcp QP, or -1 (not tcp, or not connected yet).
int socket_fd(QueuePair& qp);
}  // namespace rdmx::tcp::testing
