// SPDX-License-Identifier: MIT
// examples/all_reduce.cpp: every rank adds its vector into everyone's.
//
// Start it on local ranks with `rdmx run -n 4 -- build/examples/rdmx_all_reduce`
// (`make example` does), or under torchrun, mpirun or srun:
// Communicator::from_env() reads each of them. Rank r contributes
// (r + 1) * (i % 1000 + 1) at index i, so after the sum every rank must hold
// n(n + 1)/2 * (i % 1000 + 1): small integers, exact in float, so the check
// is exact. Usage: rdmx_all_reduce [count]
#include <rdmx/comm.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

namespace {

constexpr std::size_t kDefaultCount = std::size_t{1} << 20;  // 4 MiB of floats

float contribution(int rank, std::size_t i) { return static_cast<float>(rank + 1) * static_cast<float>(i % 1000 + 1); }

std::size_t parse_count(int argc, char** argv) {
  if (argc < 2) return kDefaultCount;
  char* end = nullptr;
  const unsigned long long count = std::strtoull(argv[1], &end, 10);
  if (*end != '\0' || count == 0 || count > (1ull << 30)) {
    throw rdmx::Error(rdmx::ErrorCode::InvalidArgument, std::string("bad count '") + argv[1] + "'",
                      {.hint = "usage: rdmx_all_reduce [count], 1 <= count <= 2^30 floats"});
  }
  return count;
}

// How this rank reaches its peers ("shm", "tcp"; "shm+tcp" when they differ).
std::string transports(const rdmx::Communicator& comm) {
  std::string out;
  for (const std::string& p : comm.peer_providers()) {
    if (!p.empty() && out.find(p) == std::string::npos) out += (out.empty() ? "" : "+") + p;
  }
  return out.empty() ? "nothing (1 rank)" : out;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // ranks share a terminal
  try {
    const std::size_t count = parse_count(argc, argv);
    // RDMX_RANK/RDMX_WORLD_SIZE/RDMX_STORE (rdmx run), torchrun, Open MPI, MPICH or Slurm.
    std::unique_ptr<rdmx::Communicator> comm = rdmx::Communicator::from_env();
    const int rank = comm->rank();
    const int size = comm->size();

    std::vector<float> mine(count);
    std::vector<float> sum(count);
    for (std::size_t i = 0; i < count; ++i) mine[i] = contribution(rank, i);
    comm->all_reduce(mine.data(), sum.data(), count, rdmx::DataType::Float32, rdmx::ReduceOp::Sum);

    // Every rank checks every element: sum over r of (r + 1) is n(n + 1)/2.
    const float ranks_total = static_cast<float>(size * (size + 1) / 2);
    for (std::size_t i = 0; i < count; ++i) {
      const float expected = ranks_total * static_cast<float>(i % 1000 + 1);
      if (sum[i] != expected) {
        throw rdmx::Error(rdmx::ErrorCode::Protocol,
                          "wrong sum at element " + std::to_string(i) + ": got " + std::to_string(sum[i]) +
                              ", expected " + std::to_string(expected),
                          {.op = "all_reduce", .rank = rank});
      }
    }
    std::printf(
        "rank %d of %d: all_reduce (sum) of %zu floats over %s: every element correct (element 0 = %g = "
        "1 + ... + %d)\n",
        rank, size, count, transports(*comm).c_str(), sum[0], size);
    return 0;
  } catch (const rdmx::Error& e) {
    std::fprintf(stderr, "rdmx_all_reduce: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rdmx_all_reduce: unexpected error: %s\n", e.what());
    return 1;
  }
}
