// SPDX-License-Identifier: MIT
// Instantiates the conformance suite for every provider built, every
// placement and every memory kind.
#include <cctype>
#include <map>
#include <utility>
#include <vector>

#include "conformance/conformance.hpp"
#include "support/cuda_device.hpp"
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

void Conformance::SetUp() {
  if (GetParam().memory == BufferMemory::Host) return;
  // Asked once per provider and memory in this process (in a child: the
  // test process must not initialise CUDA before it forks ranks). Exportable
  // memory differs from cudaMalloc memory only where peers map it.
  static std::map<std::pair<std::string, BufferMemory>, std::pair<bool, std::string>> served;
  const auto key = std::make_pair(GetParam().provider, GetParam().memory);
  auto it = served.find(key);
  if (it == served.end()) {
    std::string why;
    const bool yes =
        device_memory_served_in_child(GetParam().provider, &why, GetParam().memory == BufferMemory::ExportableDevice);
    it = served.emplace(key, std::make_pair(yes, why)).first;
  }
  if (!it->second.first) GTEST_SKIP() << it->second.second;
}

::testing::AssertionResult Conformance::run(int n, const RankBody& body, Options options) {
  options.provider = GetParam().provider;
  const BufferMemory memory = GetParam().memory;
  if (memory == BufferMemory::Host) return run_ranks(n, GetParam().placement, body, options);
  return run_ranks(
      n, GetParam().placement,
      [&body, memory](RankEnv& env) {
        set_buffer_memory(memory);
        body(env);
      },
      options);
}

namespace {

std::vector<ConformanceParam> host_params() {
  std::vector<ConformanceParam> params;
  for (const std::string& provider : tested_providers()) {
    params.push_back({provider, Placement::Local});
    if (!tested_across_namespaces(provider)) continue;
    params.push_back({provider, Placement::NetNsIPv4});
    params.push_back({provider, Placement::NetNsIPv6});
  }
  return params;
}

std::vector<ConformanceParam> device_params(BufferMemory memory) {
  std::vector<ConformanceParam> params;
  for (const std::string& provider : tested_providers()) params.push_back({provider, Placement::Local, memory});
  return params;
}

std::string name_of(const ::testing::TestParamInfo<ConformanceParam>& p) { return param_name(p.param); }

INSTANTIATE_TEST_SUITE_P(Providers, Conformance, ::testing::ValuesIn(host_params()), name_of);
INSTANTIATE_TEST_SUITE_P(CudaMemory, Conformance, ::testing::ValuesIn(device_params(BufferMemory::Device)), name_of);
INSTANTIATE_TEST_SUITE_P(CudaVmmMemory, Conformance, ::testing::ValuesIn(device_params(BufferMemory::ExportableDevice)),
                         name_of);
INSTANTIATE_TEST_SUITE_P(Providers, HostMemoryConformance, ::testing::ValuesIn(host_params()), name_of);

}  // namespace
}  // namespace rdmx::test
