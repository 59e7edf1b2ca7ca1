// SPDX-License-Identifier: MIT
// One rank of a fault campaign or soak (scripts/chaos.py): random
// collectives on the public API, every result checked bit-exactly, until
// a time or iteration bound, or until an error, which it reports and exits
// on. All ranks draw the same sequence from the seed.
//
// Inputs are small integers (-7..7), exact in every type used and in every
// sum, min and max of up to 64 ranks, so any algorithm's reduction order
// gives the same bits.
//
// Each event is one JSON line on stdout:
//   {"event":"ready","rank":R,"pid":P,"mono_ns":T}
//   {"event":"error","rank":R,"code":"peer
//   failure","peer_rank":Q,"iteration":I,"op":"all_reduce","mono_ns":T,"message":"..."}
//   {"event":"wrong_result","rank":R,"iteration":I,"op":"...","type":"...","count":N,"index":J,"got":"...","expected":"..."}
//   {"event":"done","rank":R,"iterations":I,"mono_ns":T}
// Exit status: 0 done, 3 error, 4 wrong result, 2 usage.
#include <time.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "rdmx/comm.hpp"
#include "rdmx/error.hpp"
#include "rdmx/verbs.hpp"

namespace {

using rdmx::CollOp;
using rdmx::DataType;
using rdmx::ReduceOp;

std::int64_t mono_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::string json_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

void emit(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

// The input value every rank agrees on for (rank, iteration, index).
int value_of(int rank, std::uint64_t iteration, std::size_t index) {
  const std::uint64_t h = (static_cast<std::uint64_t>(rank) * 0x9E3779B97F4A7C15ull) ^
                          (iteration * 0xC2B2AE3D27D4EB4Full) ^
                          (static_cast<std::uint64_t>(index) * 0x165667B19E3779F9ull);
  return static_cast<int>((h >> 29) % 15) - 7;
}

constexpr DataType kTypes[] = {DataType::Float32, DataType::Float64, DataType::Int32, DataType::Int64,
                               DataType::BFloat16};
constexpr ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max};
constexpr CollOp kColls[] = {CollOp::AllReduce, CollOp::AllGather, CollOp::ReduceScatter,
                             CollOp::Broadcast, CollOp::Reduce,    CollOp::AllToAll,
                             CollOp::Gather,    CollOp::Scatter,   CollOp::Barrier};

// Typed storage of small integers, as bytes.
void store(DataType type, void* base, std::size_t index, long long v) {
  switch (type) {
    case DataType::Float32: static_cast<float*>(base)[index] = static_cast<float>(v); break;
    case DataType::Float64: static_cast<double*>(base)[index] = static_cast<double>(v); break;
    case DataType::Int32: static_cast<std::int32_t*>(base)[index] = static_cast<std::int32_t>(v); break;
    case DataType::Int64: static_cast<std::int64_t*>(base)[index] = v; break;
    case DataType::BFloat16: {
      const float f = static_cast<float>(v);  // a small integer: its upper 16 bits are exact
      std::uint32_t bits;
      std::memcpy(&bits, &f, 4);
      static_cast<std::uint16_t*>(base)[index] = static_cast<std::uint16_t>(bits >> 16);
      break;
    }
    default: std::abort();
  }
}

long long combine(ReduceOp op, long long a, long long b) {
  switch (op) {
    case ReduceOp::Sum: return a + b;
    case ReduceOp::Min: return a < b ? a : b;
    case ReduceOp::Max: return a > b ? a : b;
    default: std::abort();
  }
}

struct Step {
  CollOp coll;
  DataType type;
  ReduceOp op;
  std::size_t count;
  int root;
};

Step draw(std::mt19937_64& rng, int size, std::size_t max_bytes) {
  Step s{};
  s.coll = kColls[rng() % std::size(kColls)];
  s.type = kTypes[rng() % std::size(kTypes)];
  s.op = kOps[rng() % std::size(kOps)];
  const std::size_t max_count =
      std::max<std::size_t>(1, max_bytes / rdmx::size_of(s.type) / static_cast<std::size_t>(size));
  int bits = 0;
  while ((std::size_t{1} << (bits + 1)) <= max_count) ++bits;
  s.count = 1 + rng() % (std::size_t{1} << (rng() % (bits + 1)));
  s.root = static_cast<int>(rng() % static_cast<std::uint64_t>(size));
  return s;
}

struct Options {
  double seconds = 0;
  std::uint64_t iterations = 0;
  std::uint64_t seed = 1;
  std::size_t max_bytes = 1 << 20;
};

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    if (a == "--seconds") {
      o.seconds = std::atof(v);
    } else if (a == "--iterations") {
      o.iterations = std::strtoull(v, nullptr, 10);
    } else if (a == "--seed") {
      o.seed = std::strtoull(v, nullptr, 10);
    } else if (a == "--max-bytes") {
      o.max_bytes = std::strtoull(v, nullptr, 10);
    } else {
      return false;
    }
  }
  return o.seconds > 0 || o.iterations > 0;
}

}  // namespace

int main(int argc, char** argv) {
  // As a launcher does after killing ranks (rdmx run): remove what they left on this host.
  if (argc == 2 && std::string_view(argv[1]) == "--remove-stale") {
    std::printf("%zu\n", rdmx::remove_stale_endpoints());
    return 0;
  }
  Options o;
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr,
                 "usage: rdmx_chaos_worker (--seconds S | --iterations N) [--seed X] [--max-bytes B]\n"
                 "       rdmx_chaos_worker --remove-stale\n"
                 "  one rank of scripts/chaos.py: random collectives, checked bit-exactly\n");
    return 2;
  }
  int rank = -1;
  std::uint64_t iteration = 0;
  std::int64_t op_start = 0;  // when the current collective was entered
  Step step{};
  // Declared outside the try: an error is reported when the collective
  // raises it, before the communicator's teardown (which waits, briefly,
  // for the peers' goodbyes).
  std::unique_ptr<rdmx::Communicator> comm;
  try {
    comm = rdmx::Communicator::from_env();
    rank = comm->rank();
    const int size = comm->size();
    emit("{\"event\":\"ready\",\"rank\":" + std::to_string(rank) + ",\"pid\":" + std::to_string(::getpid()) +
         ",\"mono_ns\":" + std::to_string(mono_ns()) + "}");
    const std::int64_t end = o.seconds > 0 ? mono_ns() + static_cast<std::int64_t>(o.seconds * 1e9) : INT64_MAX;
    std::vector<unsigned char> send, recv, expect;
    for (; o.iterations == 0 || iteration < o.iterations; ++iteration) {
      // Every rank decides to stop at the same iteration: the time bound is agreed on by rank 0's clock.
      if (o.seconds > 0 && iteration % 64 == 0) {
        std::int64_t stop = mono_ns() >= end ? 1 : 0;
        comm->broadcast(&stop, 1, DataType::Int64, 0);
        if (stop != 0) break;
      }
      std::mt19937_64 rng(o.seed * 1000003 + iteration);
      step = draw(rng, size, o.max_bytes);
      const std::size_t esize = rdmx::size_of(step.type);
      const std::size_t n = step.count;
      const auto p = static_cast<std::size_t>(size);
      std::size_t send_count = n, recv_count = n;
      switch (step.coll) {
        case CollOp::AllGather:
        case CollOp::Gather: recv_count = n * p; break;
        case CollOp::ReduceScatter:
        case CollOp::Scatter: send_count = n * p; break;
        case CollOp::AllToAll: send_count = recv_count = n * p; break;
        default: break;
      }
      send.assign(send_count * esize, 0);
      recv.assign(recv_count * esize, 0xEE);
      expect.assign(recv_count * esize, 0xEE);
      const bool scatter_sender = step.coll != CollOp::Scatter || rank == step.root;
      for (std::size_t j = 0; j < send_count && scatter_sender; ++j)
        store(step.type, send.data(), j, value_of(rank, iteration, j));
      auto reduced = [&](std::size_t j) {
        long long acc = value_of(0, iteration, j);
        for (int r = 1; r < size; ++r) acc = combine(step.op, acc, value_of(r, iteration, j));
        return acc;
      };
      bool check = true;
      op_start = mono_ns();
      switch (step.coll) {
        case CollOp::AllReduce:
          comm->all_reduce(send.data(), recv.data(), n, step.type, step.op);
          for (std::size_t j = 0; j < n; ++j) store(step.type, expect.data(), j, reduced(j));
          break;
        case CollOp::Reduce:
          comm->reduce(send.data(), recv.data(), n, step.type, step.op, step.root);
          check = rank == step.root;
          for (std::size_t j = 0; j < n && check; ++j) store(step.type, expect.data(), j, reduced(j));
          break;
        case CollOp::Broadcast:
          recv = send;
          comm->broadcast(recv.data(), n, step.type, step.root);
          for (std::size_t j = 0; j < n; ++j) store(step.type, expect.data(), j, value_of(step.root, iteration, j));
          break;
        case CollOp::AllGather:
        case CollOp::Gather:
          if (step.coll == CollOp::AllGather) {
            comm->all_gather(send.data(), recv.data(), n, step.type);
          } else {
            comm->gather(send.data(), recv.data(), n, step.type, step.root);
            check = rank == step.root;
          }
          for (int s = 0; s < size && check; ++s) {
            for (std::size_t k = 0; k < n; ++k) store(step.type, expect.data(), s * n + k, value_of(s, iteration, k));
          }
          break;
        case CollOp::ReduceScatter:
          comm->reduce_scatter(send.data(), recv.data(), n, step.type, step.op);
          for (std::size_t k = 0; k < n; ++k) store(step.type, expect.data(), k, reduced(rank * n + k));
          break;
        case CollOp::Scatter:
          comm->scatter(send.data(), recv.data(), n, step.type, step.root);
          for (std::size_t k = 0; k < n; ++k) {
            store(step.type, expect.data(), k, value_of(step.root, iteration, rank * n + k));
          }
          break;
        case CollOp::AllToAll:
          comm->all_to_all(send.data(), recv.data(), n, step.type);
          for (int s = 0; s < size; ++s) {
            for (std::size_t k = 0; k < n; ++k) {
              store(step.type, expect.data(), s * n + k, value_of(s, iteration, rank * n + k));
            }
          }
          break;
        case CollOp::Barrier:
          comm->barrier();
          check = false;
          break;
        default: break;
      }
      if (check && recv != expect) {
        std::size_t at = 0;
        while (recv[at] == expect[at]) ++at;
        emit("{\"event\":\"wrong_result\",\"rank\":" + std::to_string(rank) +
             ",\"iteration\":" + std::to_string(iteration) + ",\"op\":\"" + rdmx::to_string(step.coll) +
             "\",\"type\":\"" + rdmx::to_string(step.type) + "\",\"reduce\":\"" + rdmx::to_string(step.op) +
             "\",\"count\":" + std::to_string(n) + ",\"byte\":" + std::to_string(at) +
             ",\"got\":" + std::to_string(recv[at]) + ",\"expected\":" + std::to_string(expect[at]) + "}");
        return 4;
      }
    }
    emit("{\"event\":\"done\",\"rank\":" + std::to_string(rank) + ",\"iterations\":" + std::to_string(iteration) +
         ",\"mono_ns\":" + std::to_string(mono_ns()) + "}");
    return 0;
  } catch (const rdmx::Error& e) {
    const std::int64_t t = mono_ns();
    emit("{\"event\":\"error\",\"rank\":" + std::to_string(rank) + ",\"code\":\"" + rdmx::to_string(e.code()) +
         "\",\"peer_rank\":" + std::to_string(e.context().peer_rank) + ",\"iteration\":" + std::to_string(iteration) +
         ",\"op\":\"" + rdmx::to_string(step.coll) + "\",\"op_start_ns\":" + std::to_string(op_start) +
         ",\"mono_ns\":" + std::to_string(t) + ",\"message\":\"" + json_escape(e.what()) + "\"}");
    return 3;
  }
}
