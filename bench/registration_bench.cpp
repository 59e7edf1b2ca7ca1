// SPDX-License-Identifier: MIT
// What registering a buffer costs on a device, against asking a
// RegistrationCache for it again (what collectives now do with user buffers
// between operations): Google Benchmark, one PD of the device RDMX_PROVIDER
// opens (verbs in the soft-RoCE guest: bench/run_verbs.sh).
//   RDMX_PROVIDER=verbs build/bench/registration_bench
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <cstring>
#include <memory>

#include "rdmx/registration_cache.hpp"
#include "rdmx/verbs.hpp"

namespace {

using namespace rdmx;

struct Setup {
  std::shared_ptr<Device> device = open_device("auto");
  std::unique_ptr<ProtectionDomain> pd = device->alloc_pd();
};
Setup& setup() {
  static Setup s;
  return s;
}

struct Mapping {
  explicit Mapping(std::size_t n) : bytes(n) {
    addr = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (addr != MAP_FAILED) std::memset(addr, 1, n);  // pages present, as a used buffer's are
  }
  ~Mapping() {
    if (addr != MAP_FAILED) ::munmap(addr, bytes);
  }
  std::size_t bytes;
  void* addr;
};

const Access kRights = Access::LocalWrite | Access::RemoteWrite;

// ibv_reg_mr + ibv_dereg_mr on verbs: what each operation paid before.
void RegisterAndDeregister(benchmark::State& state) {
  Mapping m(static_cast<std::size_t>(state.range(0)));
  if (m.addr == MAP_FAILED) return state.SkipWithError("mmap failed");
  for (auto _ : state) {
    auto mr = setup().pd->register_memory(m.addr, m.bytes, kRights);
    benchmark::DoNotOptimize(mr->rkey());
  }
  state.SetLabel(setup().device->name());
}

// The same buffer asked for again: a lookup, and on a device that pins
// memory, a check of its unmap watch. `pins` 1 treats any device as one
// that pins, to time the watched path natively where no NIC is.
void CacheHit(benchmark::State& state) {
  Mapping m(static_cast<std::size_t>(state.range(0)));
  if (m.addr == MAP_FAILED) return state.SkipWithError("mmap failed");
  DeviceCaps caps = setup().device->caps();
  caps.registration_pins_memory = caps.registration_pins_memory || state.range(1) != 0;
  RegistrationCache cache(*setup().pd, caps);
  cache.get(m.addr, m.bytes, kRights);
  for (auto _ : state) {
    cache.forget_unwatched();  // as each collective starts
    benchmark::DoNotOptimize(cache.get(m.addr, m.bytes, kRights).rkey());
  }
  const auto stats = cache.stats();
  state.counters["misses"] = static_cast<double>(stats.misses);
  const bool pins = caps.registration_pins_memory;
  state.SetLabel(!pins                         ? "registration pins nothing"
                 : unmap_detection().available ? "unmaps watched"
                                               : "unmaps not watched");
}

BENCHMARK(RegisterAndDeregister)->RangeMultiplier(16)->Range(64 << 10, 256 << 20)->Unit(benchmark::kMicrosecond);
BENCHMARK(CacheHit)->ArgsProduct({{64 << 10, 1 << 20, 16 << 20, 256 << 20}, {0, 1}})->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
