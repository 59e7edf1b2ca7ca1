// SPDX-License-Identifier: MIT
// The providers every parameterized suite runs on, listed in one place (as
// Gloo's kTransports and UCX's UCT_TEST_TLS): the conformance suite, the
// collectives, and the tools' tests all take theirs from here, so a provider
// added to the library is tested everywhere at once.
#pragma once

#include <string>
#include <vector>

namespace rdmx::test {

// Each provider built that can run on this host (verbs only where an RDMA
// device exists: the soft-RoCE guest, or a host with an HCA; without one,
// tests/verbs checks that it fails clearly), then, with `with_auto`, "auto",
// which picks one per peer.
std::vector<std::string> tested_providers(bool with_auto = true);

// Whether a provider reaches peers on other hosts, so that suites also run it
// between network namespaces (verbs addresses peers by GID or LID, not by the
// namespaces' sockets, so namespaces would test nothing more there).
bool tested_across_namespaces(const std::string& provider);

}  // namespace rdmx::test
