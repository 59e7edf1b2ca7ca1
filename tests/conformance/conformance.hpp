// SPDX-License-Identifier: MIT
// The conformance suite: every test runs for each (provider x placement x
// memory) in real separate processes, and must pass unchanged on every
// provider (rdmx::available_providers() decides which ones run).
//
// Memory is where the cases' Buffers live (support/buffer.hpp): host memory
// in every placement, and GPU memory, cuMemAlloc'd or exportable cuMemCreate
// memory, in the Local placement. The GPU halves skip, saying why, without a
// GPU or on a provider that serves no device memory; CI runs them on the
// simulated driver (tests/cuda_sim).
//
// Test names read "<Memory>/Conformance.<Case>/<Provider>_<Placement>", e.g.
//   Providers/Conformance.RdmaWrite/Tcp_NetNsIPv6     host memory
//   CudaMemory/Conformance.RdmaWrite/Shm_Local        cuMemAlloc memory
//   CudaVmmMemory/Conformance.RdmaWrite/Shm_Local     exportable cuMemCreate memory
// Cases whose subject is host memory itself (munmap, the PD's own
// allocations) or no memory at all use HostMemoryConformance, which runs in
// the host half only.
#pragma once

#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "support/buffer.hpp"
#include "support/harness.hpp"
#include "support/verbs_util.hpp"

namespace rdmx::test {

// The two ranks of a one-sided case: the target owns the memory, the
// initiator posts the work requests.
inline constexpr int kTarget = 0;
inline constexpr int kInitiator = 1;

struct ConformanceParam {
  std::string provider;
  Placement placement;
  BufferMemory memory = BufferMemory::Host;
};
std::string param_name(const ConformanceParam& param);
inline void PrintTo(const ConformanceParam& p, std::ostream* os) {
  *os << param_name(p) << " (" << to_string(p.memory) << " memory)";
}

class Conformance : public ::testing::TestWithParam<ConformanceParam> {
 protected:
  static void TearDownTestSuite() { NetNsPair::destroy(); }
  // The GPU halves skip where no GPU or no device-memory support is.
  void SetUp() override;

  // Runs `body` in n ranks with this test's provider, placement and memory.
  ::testing::AssertionResult run(int n, const RankBody& body, Options options = {});
};

class HostMemoryConformance : public Conformance {};

}  // namespace rdmx::test
