// SPDX-License-Identifier: MIT
// Instantiates the conformance suite for every provider built and every placement.
#include <cctype>
#include <vector>

#include "conformance/conformance.hpp"
#include "support/providers.hpp"

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
  for (const std::string& provider : tested_providers()) {
    params.push_back({provider, Placement::Local});
    if (!tested_across_namespaces(provider)) continue;
    params.push_back({provider, Placement::NetNsIPv4});
    params.push_back({provider, Placement::NetNsIPv6});
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(Providers, Conformance, ::testing::ValuesIn(all_params()),
                         [](const ::testing::TestParamInfo<ConformanceParam>& p) { return param_name(p.param); });

}  // namespace
}  // namespace rdmx::test
