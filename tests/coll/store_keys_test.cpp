// SPDX-License-Identifier: MIT
// Communicators made and destroyed leave nothing in the store: a job that
// makes groups over and over (torch's new_group) must not grow the rank that
// serves the store.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "coll/coll_support.hpp"

namespace rdmx::test {
namespace {

// This process's resident memory, from /proc/self/statm.
std::size_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  CHECK(f != nullptr) << "cannot open /proc/self/statm";
  unsigned long long size = 0, resident = 0;
  const int got = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  CHECK_EQ(got, 2) << "cannot read /proc/self/statm";
  return static_cast<std::size_t>(resident) * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

std::string describe(const StoreStats& s) {
  return std::to_string(s.keys) + " keys, " + std::to_string(s.bytes) + " bytes, " + std::to_string(s.parked) +
         " parked, " + std::to_string(s.clients) + " clients";
}

constexpr int kPerPhase = 100;  // communicators per phase, two phases
constexpr int kServer = 3;      // the rank serving the store

// Ranks 0-2 make, use and destroy 2 x 100 communicators (every tenth also
// split) over a TCP store that rank 3 serves and does nothing else. After
// each hundred the server holds what it held before the first, and its
// resident memory does not grow from the first hundred to the second.
// The store's side does not depend on the provider: tcp runs it.
TEST(CommStoreKeys, DestroyedCommunicatorsLeaveNoKeysAndTheServerDoesNotGrow) {
  ASSERT_TRUE(run_coll_ranks(
      {"tcp", 4},
      [](RankEnv& env) {
        ServedStore served = serve_tcp_store(env, kServer, "churn/port");
        std::shared_ptr<Store> store = served.store;
        env.barrier("connected");
        std::vector<StoreStats> stats;
        std::vector<std::size_t> resident;
        auto look = [&] {
          stats.push_back(store->stats());
          resident.push_back(resident_bytes());
        };
        if (env.rank() == kServer) look();
        env.barrier("looked");
        for (int phase = 0; phase < 2; ++phase) {
          for (int i = phase * kPerPhase; env.rank() != kServer && i < (phase + 1) * kPerPhase; ++i) {
            CommOptions options;
            options.provider = env.provider();
            options.tag = "churn" + std::to_string(i);
            auto comm = Communicator::create(store, env.rank(), 3, options);
            std::int64_t one = 1, sum = 0;
            comm->all_reduce(&one, &sum, 1, DataType::Int64, ReduceOp::Sum);
            CHECK_EQ(sum, std::int64_t{3});
            if (i % 10 == 0) {
              auto sub = comm->split(env.rank() == 0 ? 0 : 1, 0);
              sub->all_reduce(&one, &sum, 1, DataType::Int64, ReduceOp::Sum);
              CHECK_EQ(sum, std::int64_t{env.rank() == 0 ? 1 : 2});
            }
          }
          env.barrier("phase" + std::to_string(phase));
          if (env.rank() == kServer) look();
          env.barrier("looked" + std::to_string(phase));
        }
        if (env.rank() == kServer) {
          for (std::size_t k = 1; k < stats.size(); ++k) {
            CHECK_EQ(stats[k].keys, stats[0].keys) << "after " << k * kPerPhase << " communicators the store holds "
                                                   << describe(stats[k]) << "; before: " << describe(stats[0]);
            CHECK_EQ(stats[k].bytes, stats[0].bytes) << describe(stats[k]) << "; before: " << describe(stats[0]);
            CHECK_EQ(stats[k].parked, std::int64_t{0}) << describe(stats[k]);
            CHECK_EQ(stats[k].clients, stats[0].clients) << describe(stats[k]);
          }
          // Bounded well below what the keys of a hundred communicators took.
          constexpr std::size_t kSlack = std::size_t{64} << 10;
          CHECK_LE(resident[2], resident[1] + kSlack)
              << "the server's resident memory grew from " << resident[1] << " to " << resident[2]
              << " bytes over the second " << kPerPhase << " communicators (first: " << resident[0] << ")";
        }
        env.barrier("checked");  // every client leaves before the server stops
        store.reset();
        env.barrier("left");
      },
      std::chrono::milliseconds(240'000)));
}

}  // namespace
}  // namespace rdmx::test
