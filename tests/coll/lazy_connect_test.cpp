// SPDX-License-Identifier: MIT
// Connections on first use: a communicator connects its ring neighbours when
// it is made and every other pair the first time an operation uses it, so
// a ring opens 2 connections per rank however many ranks there are, and an
// all_to_all opens the rest. Point-to-point sends to ranks that wait on
// someone else still connect (the dial), and a rank that never comes is
// named in the error.
#include <stdlib.h>

#include <cstdio>

#include <memory>
#include <string>
#include <vector>

#include "coll/coll_support.hpp"
#include "support/text.hpp"

namespace rdmx::test {
namespace {

int connections(const Communicator& comm) {
  int n = 0;
  for (const std::string& p : comm.peer_providers()) n += p.empty() ? 0 : 1;
  return n;
}

// The case: 64 ranks on this host, small buffers so that 64 regions fit.
TEST(LazyConnect, ARingOpensTwoConnectionsPerRankAndAllToAllTheRest) {
  constexpr int kRanks = 64;
  ASSERT_TRUE(run_coll_ranks(
      {"shm", kRanks},
      [](RankEnv& env) {
        ::setenv("RDMX_COLL_BUFFSIZE", "16K", 1);
        auto comm = make_comm(env, "lazy64", "all_reduce:ring");
        const int r = env.rank();
        CHECK_EQ(connections(*comm), 2) << "made: only the ring neighbours";
        std::vector<float> v(4096, static_cast<float>(r + 1));
        comm->all_reduce(v.data(), v.data(), v.size(), DataType::Float32, ReduceOp::Sum);
        CHECK_EQ(v[0], static_cast<float>(kRanks * (kRanks + 1) / 2));
        CHECK_EQ(v[4095], static_cast<float>(kRanks * (kRanks + 1) / 2));
        CHECK_EQ(connections(*comm), 2) << "a ring all_reduce uses the two neighbours only";
        const auto providers = comm->peer_providers();
        CHECK_EQ(providers[static_cast<std::size_t>((r + 1) % kRanks)], std::string("shm"));
        CHECK_EQ(providers[static_cast<std::size_t>((r + kRanks - 1) % kRanks)], std::string("shm"));
        // A rank already in the all_to_all asks every peer to connect, and a
        // rank still waiting in the all_reduce answers (links_lazy.cpp): all
        // count first.
        env.barrier("counted after the ring");
        std::vector<std::int32_t> send(kRanks), recv(kRanks, -1);
        for (int p = 0; p < kRanks; ++p) send[static_cast<std::size_t>(p)] = r * 1000 + p;
        comm->all_to_all(send.data(), recv.data(), 1, DataType::Int32);
        for (int p = 0; p < kRanks; ++p) CHECK_EQ(recv[static_cast<std::size_t>(p)], p * 1000 + r) << "from " << p;
        CHECK_EQ(connections(*comm), kRanks - 1) << "all_to_all connects every pair";
        comm->all_reduce(v.data(), v.data(), v.size(), DataType::Float32, ReduceOp::Sum);
        CHECK_EQ(connections(*comm), kRanks - 1);
      },
      std::chrono::milliseconds(300'000)));
}

// This process's resident shared memory (its region, the peers' regions
// it maps, the shm rings), from /proc/self/status.
std::size_t resident_shared_bytes() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  CHECK(f != nullptr) << "cannot open /proc/self/status";
  char line[256];
  std::size_t kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "RssShmem: %zu kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib << 10;
}

// Memory follows what the pairs move: at the default 4 MiB a peer's inbox
// and staging area have room for 8 MiB, and take pages as data passes
// through them (a full mesh held all 7 peers' 8 MiB from the start).
TEST(LazyConnect, MemoryGrowsWithWhatThePairsMove) {
  ASSERT_TRUE(run_coll_ranks({"shm", 8}, [](RankEnv& env) {
    ::unsetenv("RDMX_COLL_BUFFSIZE");
    constexpr std::size_t kMiB = std::size_t{1} << 20;
    const std::size_t before = resident_shared_bytes();
    auto comm = make_comm(env, "lazy-memory");
    const std::size_t made = resident_shared_bytes() - before;
    CHECK_LT(made, 2 * kMiB) << "no pair's window takes memory before the pair moves data";
    std::vector<std::int32_t> send(8, env.rank()), recv(8, -1);
    comm->all_to_all(send.data(), recv.data(), 1, DataType::Int32);
    const std::size_t small = resident_shared_bytes() - before;
    CHECK_LT(small, made + 5 * 8 * kMiB) << "8 bytes to each of 5 new peers do not take their whole windows";
    constexpr std::size_t kBlock = std::size_t{1} << 20;  // 4 MiB of int32 to each peer
    std::vector<std::int32_t> big(8 * kBlock, env.rank()), big_in(8 * kBlock, -1);
    comm->all_to_all(big.data(), big_in.data(), kBlock, DataType::Int32);
    CHECK_EQ(big_in[3 * kBlock], 3);
    const std::size_t moved = resident_shared_bytes() - before;
    CHECK_GE(moved, made + 16 * kMiB) << "4 MiB to each of 7 peers went through their windows";
    CHECK_LT(moved, made + 7 * 9 * kMiB) << "at most every peer's two 4 MiB areas and its rings";
  }));
}

// Each rank sends to the rank two ahead and then receives from the rank two
// behind: every rank first waits for a pair whose other end is busy with
// its own first send. Those peers connect only because waiting ranks answer
// the ranks that dial them.
TEST(LazyConnect, SendsToRanksBusyElsewhereConnectThroughTheirDials) {
  for (const char* provider : {"shm", "tcp"}) {
    SCOPED_TRACE(provider);
    ASSERT_TRUE(run_coll_ranks({provider, 5}, [](RankEnv& env) {
      ::setenv("RDMX_COLL_BUFFSIZE", "64K", 1);
      auto comm = make_comm(env, "lazy-p2p");
      const int r = env.rank(), n = comm->size();
      // Larger than RDMX_COLL_STAGE_LIMIT: the send completes only as the peer receives.
      std::vector<std::int64_t> out(8192, r), in(8192, -1);
      comm->send(out.data(), out.size(), DataType::Int64, (r + 2) % n);
      comm->recv(in.data(), in.size(), DataType::Int64, (r + n - 2) % n);
      CHECK_EQ(in[0], (r + n - 2) % n);
      CHECK_EQ(in[8191], (r + n - 2) % n);
      CHECK_EQ(connections(*comm), 4) << "the ring neighbours and the two p2p peers";
    }));
  }
}

// A rank that never reaches the operation which needs its pair: the peer
// that waits to connect names it, with what the rank published of itself.
TEST(LazyConnect, APeerThatNeverConnectsIsNamedAtTheTimeout) {
  ASSERT_TRUE(run_coll_ranks({"shm", 4}, [](RankEnv& env) {
    CommOptions options;
    options.provider = env.provider();
    options.tag = "lazy-absent";
    options.timeout = std::chrono::milliseconds(3000);
    auto comm = Communicator::create(env.store_ptr(), env.rank(), env.world_size(), options);
    std::vector<std::int64_t> buf(4, env.rank());
    if (env.rank() == 0) {
      std::string text;
      try {
        comm->send(buf.data(), buf.size(), DataType::Int64, 2);
        FAIL_RANK() << "a send to a rank that never receives connected";
      } catch (const Error& e) {
        CHECK_EQ(e.code(), ErrorCode::Timeout) << e.what();
        text = e.what();
      }
      CHECK(contains(text, "connecting to rank 2 failed")) << text;
      CHECK(contains(text, "no connection address from rank 2")) << text;
    }
    env.barrier("done");
  }));
}

// Pairs connected on first use, through dials, leave nothing in the store
// once the communicator is destroyed: ranks 0-4 connect every pair (the
// cycle of sends above, then an all_to_all) over a store rank 5 serves.
TEST(LazyConnect, ADestroyedCommunicatorLeavesNoKeysOfItsPairsOrDials) {
  constexpr int kServer = 5;
  ASSERT_TRUE(run_coll_ranks({"tcp", 6}, [](RankEnv& env) {
    ServedStore served = serve_tcp_store(env, kServer, "lazy-keys/port");
    std::shared_ptr<Store> store = served.store;
    env.barrier("connected");
    StoreStats before;
    if (env.rank() == kServer) before = store->stats();
    env.barrier("looked");
    if (env.rank() != kServer) {
      ::setenv("RDMX_COLL_BUFFSIZE", "64K", 1);
      CommOptions options;
      options.provider = env.provider();
      options.tag = "lazy-keys";
      auto comm = Communicator::create(store, env.rank(), kServer, options);
      const int r = env.rank(), n = kServer;
      std::vector<std::int64_t> out(8192, r), in(8192, -1);
      comm->send(out.data(), out.size(), DataType::Int64, (r + 2) % n);
      comm->recv(in.data(), in.size(), DataType::Int64, (r + n - 2) % n);
      CHECK_EQ(in[0], (r + n - 2) % n);
      std::vector<std::int32_t> send(n, r), recv(n, -1);
      comm->all_to_all(send.data(), recv.data(), 1, DataType::Int32);
      for (int p = 0; p < n; ++p) CHECK_EQ(recv[static_cast<std::size_t>(p)], p);
      CHECK_EQ(connections(*comm), n - 1);
    }
    env.barrier("destroyed");
    if (env.rank() == kServer) {
      const StoreStats after = store->stats();
      std::string left;
      for (const std::string& key : store->keys("lazy-keys")) left += " " + key;
      CHECK_EQ(after.keys, before.keys) << "keys left:" << left;
      CHECK_EQ(after.parked, std::int64_t{0});
    }
    env.barrier("checked");
    store.reset();
    env.barrier("left");
  }));
}

}  // namespace
}  // namespace rdmx::test
