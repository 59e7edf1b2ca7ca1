// SPDX-License-Identifier: MIT
// Shared pieces of the collective tests: where ranks run, how a
// communicator is made there, inputs as a function of (rank, index), and a
// reference written independently of the library (no rdmx reduction or
// conversion code is used to compute expected values).
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "rdmx/bootstrap.hpp"
#include "rdmx/comm.hpp"
#include "support/harness.hpp"
#include "support/providers.hpp"

namespace rdmx::test {

// Where the ranks of a provider (support/providers.hpp) run. A provider
// named: every rank on this host, that provider. "auto" ("mix" in test
// names): two hosts, rank 0 in one network namespace (and with a private shm
// socket directory, as a separate machine would have), the others in a
// second; auto picks shm between ranks of one host and tcp across.
// `device`: the operations' buffers are CUDA device memory (on GPU 0,
// which every rank shares), filled and checked through host copies.
struct CollParam {
  std::string provider;
  int n;
  bool device = false;
};
// "shm", "tcp", "mix" (for auto).
std::string transport_label(const std::string& provider);
bool mixed(const std::string& provider);
std::string param_name(const CollParam& param);
inline void PrintTo(const CollParam& param, std::ostream* os) { *os << param_name(param); }

// run_ranks for a provider.
::testing::AssertionResult run_coll_ranks(const CollParam& param, const RankBody& body,
                                          std::chrono::milliseconds timeout = std::chrono::milliseconds(240'000),
                                          std::vector<int> may_be_killed = {});
// A communicator over all ranks of the run; `algo` as RDMX_ALGO ("" = table).
std::unique_ptr<Communicator> make_comm(RankEnv& env, const std::string& tag, const std::string& algo = "");

// A TCP store that rank `server_rank` of the run serves and every rank
// connects to (the run's own store passes the port, under `port_key`): for
// tests that look at what a store holds. The client goes before the server.
struct ServedStore {
  std::unique_ptr<TcpStoreServer> server;  // on the serving rank
  std::shared_ptr<Store> store;
};
ServedStore serve_tcp_store(RankEnv& env, int server_rank, const std::string& port_key);

// "full" when RDMX_COLL_MATRIX=full (the `make test-coll-full` target).
bool full_matrix();

// --- values -----------------------------------------------------------------
// Rank `rank`'s input for (type, op) at input indices first..first+count:
// values exactly representable in the type, in ranges where the op cannot
// overflow a floating type (integers wrap, which the reference models).
void fill_input(DataType type, ReduceOp op, int rank, void* out, std::size_t first, std::size_t count,
                std::uint64_t seed);
// Checks that `got` holds rank's (Sum) input at input indices
// first..first+count, bit for bit. Returns an empty string or the first mismatch.
std::string check_block(DataType type, int rank, const void* got, std::size_t first, std::size_t count,
                        std::uint64_t seed);

// Checks `count` reduced elements `got` (input indices first..first+count)
// against the reference over `n` ranks. Integers and min/max must be
// bit-exact; floating sum/prod/avg within the rounding their order allows.
// Returns an empty string or the first mismatch.
std::string check_reduced(DataType type, ReduceOp op, int n, const void* got, std::size_t first, std::size_t count,
                          std::uint64_t seed);

// 64-bit FNV-1a of a buffer (to compare results across ranks and runs).
std::uint64_t fingerprint(const void* data, std::size_t bytes);

inline constexpr DataType kAllTypes[] = {DataType::Int8,    DataType::Uint8,  DataType::Int32,   DataType::Uint32,
                                         DataType::Int64,   DataType::Uint64, DataType::Float16, DataType::BFloat16,
                                         DataType::Float32, DataType::Float64};
inline constexpr ReduceOp kAllOps[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg};

}  // namespace rdmx::test
