// SPDX-License-Identifier: MIT
// The conformance suite: every test runs for each (provider x placement) in
// real separate processes, and must pass unchanged on every provider
// (rdmx::available_providers() decides which ones run).
//
// Test names read "<Provider>_<Placement>", e.g.
//   Providers/Conformance.RdmaWrite/Tcp_Local
//   Providers/Conformance.RdmaWrite/Tcp_NetNsIPv6
#pragma once

#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "support/harness.hpp"
#include "support/verbs_util.hpp"

namespace rdmx::test {

struct ConformanceParam {
  std::string provider;
  Placement placement;
};
std::string param_name(const ConformanceParam& param);
inline void PrintTo(const ConformanceParam& p, std::ostream* os) { *os << param_name(p); }

class Conformance : public ::testing::TestWithParam<ConformanceParam> {
 protected:
  static void TearDownTestSuite() { NetNsPair::destroy(); }

  // Runs `body` in n ranks with this test's provider and placement.
  ::testing::AssertionResult run(int n, const RankBody& body, Options options = {}) {
    options.provider = GetParam().provider;
    return run_ranks(n, GetParam().placement, body, options);
  }
};

}  // namespace rdmx::test
