// SPDX-License-Identifier: MIT
// bench/reduce_bench.cpp: throughput of the reduction kernels (coll/reduce.hpp)
// per ISA, type and size, with Google Benchmark.
//
//   build-reduce/bench/reduce_bench [--benchmark_filter=fp32/sum]
//
// Each benchmark runs dst = a (op) b on three distinct buffers of `count`
// elements; bytes/s counts 3 x count x element size per call (two reads, one
// write; the write's read-for-ownership is not counted). Names are
// isa/type/op/count.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "coll/reduce.hpp"

namespace {

using rdmx::DataType;
using rdmx::ReduceOp;

struct Buffer {
  void* p = nullptr;
  explicit Buffer(std::size_t bytes) {
    if (posix_memalign(&p, 64, bytes == 0 ? 64 : bytes) != 0) std::abort();
  }
  ~Buffer() { std::free(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

// Finite values in [-2, 2) (so sums stay finite and off the NaN path), as the type's bits.
void fill(void* dst, std::size_t count, DataType type, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (std::size_t i = 0; i < count; ++i) {
    const float v = dist(rng);
    switch (type) {
      case DataType::Float16: static_cast<std::uint16_t*>(dst)[i] = rdmx::coll::float_to_half(v); break;
      case DataType::BFloat16: static_cast<std::uint16_t*>(dst)[i] = rdmx::coll::float_to_bf16(v); break;
      case DataType::Float32: static_cast<float*>(dst)[i] = v; break;
      case DataType::Float64: static_cast<double*>(dst)[i] = v; break;
      case DataType::Int32: static_cast<std::int32_t*>(dst)[i] = static_cast<std::int32_t>(rng()); break;
      default:
        std::memset(static_cast<char*>(dst) + i * rdmx::size_of(type), static_cast<int>(rng()), rdmx::size_of(type));
    }
  }
}

void run(benchmark::State& state, rdmx::coll::ReduceFn fn, DataType type) {
  const auto count = static_cast<std::size_t>(state.range(0));
  const std::size_t bytes = count * rdmx::size_of(type);
  Buffer a(bytes), b(bytes), d(bytes);
  fill(a.p, count, type, 1);
  fill(b.p, count, type, 2);
  std::memset(d.p, 0, bytes);
  for (auto _ : state) {
    fn(d.p, a.p, b.p, count);
    benchmark::DoNotOptimize(d.p);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 3 * static_cast<std::int64_t>(bytes));
}

}  // namespace

int main(int argc, char** argv) {
  struct Case {
    DataType type;
    ReduceOp op;
  };
  const Case cases[] = {{DataType::Float32, ReduceOp::Sum}, {DataType::BFloat16, ReduceOp::Sum},
                        {DataType::Float16, ReduceOp::Sum}, {DataType::Int32, ReduceOp::Sum},
                        {DataType::Float64, ReduceOp::Sum}, {DataType::Float32, ReduceOp::Max}};
  for (const char* isa : {"scalar", "avx2", "avx512"}) {
    for (const Case& c : cases) {
      const rdmx::coll::ReduceFn fn = rdmx::coll::reduce_function_for(isa, c.type, c.op);
      if (fn == nullptr) continue;  // this CPU lacks the ISA
      const std::string name = std::string(isa) + "/" + rdmx::to_string(c.type) + "/" + rdmx::to_string(c.op);
      benchmark::RegisterBenchmark(name.c_str(), run, fn, c.type)
          ->Arg(1 << 10)
          ->Arg(1 << 16)
          ->Arg(1 << 20)
          ->Arg(1 << 24)
          ->Unit(benchmark::kMicrosecond);
    }
  }
  benchmark::AddCustomContext("reduce_isa", rdmx::coll::reduce_isa());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
