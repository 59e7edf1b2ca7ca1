// SPDX-License-Identifier: MIT
// rdmx perf coll's parts: the collectives and types it sweeps, what each
// call moves (Layout), the check patterns, and the benchmark of one sweep.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/options.hpp"
#include "perf/gpu.hpp"
#include "rdmx/comm.hpp"

namespace rdmx::cli::perf_coll {

using nlohmann::json;

enum class Op { AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll, Gather, Scatter, Barrier };
constexpr const char* kOpNames[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
                                    "all_to_all", "gather",     "scatter",        "barrier"};
// nccl-tests' binary names without "_perf" (allreduce_perf is all_reduce_perf's old spelling elsewhere).
constexpr const char* kOpAliases[] = {"allreduce", "allgather", "reducescatter", "bcast", "", "alltoall", "", "", ""};

// nccl-tests' type names first; rdmx's names (DataType) are accepted too.
constexpr const char* kTypeNames[] = {"int8",   "uint8", "int32",    "uint32", "int64",
                                      "uint64", "half",  "bfloat16", "float",  "double"};
constexpr const char* kTypeAliases[] = {"", "", "int", "", "", "", "fp16", "bf16", "fp32", "fp64"};
constexpr rdmx::DataType kTypes[] = {rdmx::DataType::Int8,    rdmx::DataType::Uint8,    rdmx::DataType::Int32,
                                     rdmx::DataType::Uint32,  rdmx::DataType::Int64,    rdmx::DataType::Uint64,
                                     rdmx::DataType::Float16, rdmx::DataType::BFloat16, rdmx::DataType::Float32,
                                     rdmx::DataType::Float64};
constexpr std::size_t kTypeSizes[] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};
enum TypeIndex { kInt8, kUint8, kInt32, kUint32, kInt64, kUint64, kFp16, kBf16, kFp32, kFp64 };

constexpr const char* kRedopNames[] = {"sum", "prod", "min", "max", "avg"};
constexpr rdmx::ReduceOp kRedops[] = {rdmx::ReduceOp::Sum, rdmx::ReduceOp::Prod, rdmx::ReduceOp::Min,
                                      rdmx::ReduceOp::Max, rdmx::ReduceOp::Avg};
enum RedopIndex { kSum, kProd, kMin, kMax, kAvg };

// One sweep: a collective, a type and a reduction over the sizes.
struct Options {
  Op op = Op::AllReduce;
  std::vector<std::size_t> sizes;
  int type = kFp32;
  int redop = kSum;
  int root = 0;
  long iters = 0;    // 0: per size, from a calibration
  long warmup = -1;  // -1: max(5, iters / 10)
  bool check = true;
};

struct Layout {
  std::size_t count = 0;       // the count passed to the call
  std::size_t send_elems = 0;  // elements in the send buffer
  std::size_t recv_elems = 0;  // elements in the receive buffer
  std::size_t bytes = 0;       // the size reported: max(send, recv) bytes
};

// What each collective moves (perf_coll_model.cpp).
bool is_reduction(Op op);
bool is_rooted(Op op);
bool is_floating_type(int type);
// Which rows the API has: broadcast is in place only, barrier has no buffer.
bool has_mode(Op op, bool inplace);
// The buffers of one call of `op` for nccl-tests' size `bytes`.
Layout layout_for(Op op, std::size_t bytes, std::size_t esize, int n);
// Why layout_for() rounds a size down.
std::string rounding_reason(Op op, std::size_t esize, int n, const char* type);
// nccl-tests' bus-bandwidth factor.
double bus_factor(Op op, int n);

// Elements, stored and read back through a double (every value here is a
// small integer, or an average of them).
void store(void* buf, int type, std::size_t i, double v);
double load(const void* buf, int type, std::size_t i);
// The value as the type holds it (integers wrap, floats round).
double as_type(int type, double v);
// The check patterns, the same in the three benchmarks.
std::int64_t reduce_input(int r, std::size_t i, int redop);
std::int64_t move_input(int r, std::size_t i);
constexpr double kSentinel = -1.0;

// Send and receive buffers in device memory (--memory cuda), large enough
// for every sweep, and their GPU.
struct DeviceBuffers {
  gpu::Gpu* gpu = nullptr;
  unsigned char* send = nullptr;
  unsigned char* recv = nullptr;
};

// One sweep on a communicator (perf_coll_bench.cpp), on host buffers of its
// own, or on `device` ones (then the check copies through the driver).
class Bench {
 public:
  Bench(const Options& o, rdmx::Communicator& comm, const DeviceBuffers* device = nullptr)
      : o_(o), comm_(comm), rank_(comm.rank()), n_(comm.size()), device_(device) {}

  // One sweep; rank 0 prints its table (unless `table` is false) and fills `run`. Returns #wrong.
  long long run(JsonLines& lines, json& run, bool table);
  std::string transport() const;

 private:
  struct Buffers {
    unsigned char* send = nullptr;  // send_elems of the largest size
    unsigned char* recv = nullptr;  // max(send_elems, recv_elems) of the largest size
  };

  void placement(const Buffers& b, const Layout& l, bool inplace, unsigned char*& in, unsigned char*& out) const;
  void run_once(const Layout& l, bool inplace);
  double time_calls(const Layout& l, bool inplace, long iters);
  long iterations_for(const Layout& l, bool inplace);
  double warm_up_sweep(const std::vector<std::size_t>& sizes, std::size_t esize);
  long long check_once(const Layout& l, bool inplace);
  double expected_reduction(std::size_t i) const;
  bool same(double got, double want) const;

  const Options& o_;
  rdmx::Communicator& comm_;
  int rank_, n_;
  const DeviceBuffers* device_;
  Buffers b_;  // what the collectives are given
  Buffers h_;  // where the check writes inputs and reads results: b_ itself, or host copies of device buffers
};

}  // namespace rdmx::cli::perf_coll
