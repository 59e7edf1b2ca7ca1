// SPDX-License-Identifier: MIT
// Instantiates the conformance suite for every provider built and every placement.
#include <cctype>
#include <vector>

#include "conformance/conformance.hpp"
#include "topo/topo.hpp"

namespace rdmx::test {

std::string param_name(const ConformanceParam& param) {
  std::string name = param.provider;
  if (!name.empty()) name[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(name[0])));
  for (auto& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name + "_" + to_string(param.placement);
}

namespace {

std::vector<ConformanceParam> all_params() {
  std::vector<ConformanceParam> params;
  std::vector<std::string> providers = rdmx::available_providers();
  providers.push_back("auto");  // the default: picks a provider per peer
  for (const auto& provider : providers) {
    if (provider == "verbs") {
      // verbs runs where an RDMA device exists: in the soft-RoCE guest
      // (tests/verbs/CMakeLists: scripts/rxe-vm.sh), or on a host with an
      // HCA. Without one, tests/verbs checks that it fails clearly. It
      // addresses peers by GID or LID, not by the namespaces' sockets, so
      // the namespace placements would test nothing more. (A sysfs look,
      // not an open: the test process must stay single-threaded to fork.)
      if (!topo::scan_rdma_devices().devices.empty()) params.push_back({provider, Placement::Local});
      continue;
    }
    for (Placement placement : {Placement::Local, Placement::NetNsIPv4, Placement::NetNsIPv6}) {
      params.push_back({provider, placement});
    }
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(Providers, Conformance, ::testing::ValuesIn(all_params()),
                         [](const ::testing::TestParamInfo<ConformanceParam>& p) { return param_name(p.param); });

}  // namespace
}  // namespace rdmx::test
