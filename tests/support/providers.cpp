// SPDX-License-Identifier: MIT
#include "support/providers.hpp"

#include "rdmx/verbs.hpp"
#include "topo/topo.hpp"

namespace rdmx::test {

std::vector<std::string> tested_providers(bool with_auto) {
  std::vector<std::string> providers;
  for (const std::string& name : available_providers()) {
    // A sysfs look, not an open: test processes must stay single-threaded to fork.
    if (name == "verbs" && topo::scan_rdma_devices().devices.empty()) continue;
    providers.push_back(name);
  }
  if (with_auto) providers.push_back("auto");
  return providers;
}

bool tested_across_namespaces(const std::string& provider) { return provider != "verbs"; }

}  // namespace rdmx::test
