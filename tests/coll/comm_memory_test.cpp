// SPDX-License-Identifier: MIT
// A communicator whose buffers would not fit in its host's memory is refused
// at creation, on every rank alike, before any rank maps them, with the
// figures and the settings that change them; at a size that fits it works.
#include <stdlib.h>

#include <regex>
#include <string>
#include <vector>

#include "coll/coll_support.hpp"
#include "support/text.hpp"

namespace rdmx::test {
namespace {

// 8 ranks at the default 4 MiB map about 8 MiB for each of the 7 peers their
// operations are expected to connect to (all of them at 8 ranks), 58 MiB per
// rank, 460 MiB on the host: RDMX_COLL_MEMORY=64M stands for a host with 64 MiB.
TEST(CommMemory, BuffersBeyondTheHostsMemoryAreRefusedAtCreation) {
  ASSERT_TRUE(run_coll_ranks({"shm", 8}, [](RankEnv& env) {
    ::setenv("RDMX_COLL_MEMORY", "64M", 1);
    ::unsetenv("RDMX_COLL_BUFFSIZE");
    std::string text;
    try {
      make_comm(env, "too-big");
      FAIL_RANK() << "a communicator of 8 ranks with 460 MiB of buffers was created in 64 MiB";
    } catch (const Error& e) {
      CHECK_EQ(e.code(), ErrorCode::Config) << e.what();
      text = e.what();
    }
    CHECK(contains(text, "the collectives' buffers of the 8 ranks on host")) << text;
    CHECK(contains(text, "and it has 64 MiB available (RDMX_COLL_MEMORY=64M)")) << text;
    CHECK(contains(text, "per peer for the 7 peers its operations are expected to connect to of the 8 ranks")) << text;
    CHECK(contains(text, "RDMX_COLL_BUFFSIZE=4 MiB")) << text;
    CHECK(contains(text, "per rank")) << text;
    CHECK(contains(text, "per_peer=") && contains(text, "per_host=") && contains(text, "available=67108864")) << text;
    CHECK(contains(text, "RDMX_COLL_MEMORY sets the memory")) << text;
    // The size it suggests is one at which the same ranks do fit.
    std::smatch fits;
    CHECK(std::regex_search(text, fits, std::regex("RDMX_COLL_BUFFSIZE=([0-9]+[KM]) fits"))) << text;
    ::setenv("RDMX_COLL_BUFFSIZE", fits[1].str().c_str(), 1);
    auto comm = make_comm(env, "fits");
    comm->barrier();
  }));
}

// What a rank is expected to map: its ring neighbours' buffers and the
// log-depth algorithms' partners', growing with log2 of the communicator's
// size; the host's share grows with its ranks.
TEST(CommMemory, TheEstimateCountsThePeersALocalRankIsExpectedToUse) {
  ::setenv("RDMX_COLL_MEMORY", "23G", 1);
  ::unsetenv("RDMX_COLL_BUFFSIZE");
  const CommMemory m = comm_memory(64, 64);
  const CommMemory big = comm_memory(16384, 64);
  ::unsetenv("RDMX_COLL_MEMORY");
  // An inbox and a staging area of 4 MiB per peer, and half a shm segment per
  // local peer, for the ring's 2 and 2 x log2(64) more.
  EXPECT_EQ(m.peers, 14);
  EXPECT_EQ(big.peers, 30);
  EXPECT_GE(m.per_peer, std::size_t{8} << 20);
  EXPECT_LT(m.per_peer, std::size_t{9} << 20);
  EXPECT_GE(m.per_rank, 14 * m.per_peer);
  EXPECT_LT(m.per_rank, 14 * m.per_peer + (std::size_t{64} << 10));
  EXPECT_EQ(m.per_host, m.per_rank * 64);
  EXPECT_EQ(big.per_peer, m.per_peer);
  EXPECT_EQ(m.available, std::size_t{23} << 30);
  EXPECT_TRUE(m.fits());
  ::setenv("RDMX_COLL_MEMORY", "4G", 1);
  const CommMemory tight = comm_memory(64, 64);
  EXPECT_FALSE(tight.fits());
  EXPECT_EQ(tight.fitting_buffsize, std::size_t{2} << 20);
  EXPECT_EQ(comm_memory(8, 8).peers, 7);
  EXPECT_EQ(comm_memory(2, 2).peers, 1);
  EXPECT_EQ(comm_memory(1, 1).peers, 0);
  ::setenv("RDMX_COLL_MEMORY", "off", 1);
  EXPECT_TRUE(comm_memory(64, 64).fits());
  ::setenv("RDMX_COLL_MEMORY", "lots", 1);
  EXPECT_THROW(comm_memory(64, 64), Error);
  ::unsetenv("RDMX_COLL_MEMORY");
}

// An operation that would connect more peers than the host has memory for
// is refused before any of them is connected, with the figures.
TEST(CommMemory, ConnectingBeyondTheHostsMemoryIsRefusedByTheOperation) {
  ASSERT_TRUE(run_coll_ranks({"shm", 16}, [](RankEnv& env) {
    ::setenv("RDMX_COLL_BUFFSIZE", "256K", 1);
    // Room for the 10 peers the estimate counts at 16 ranks and 2 more, not for all 15.
    ::setenv("RDMX_COLL_MEMORY", "off", 1);
    const CommMemory m = comm_memory(16, 16);
    CHECK_EQ(m.peers, 10);
    const std::string budget = std::to_string(m.per_peer * 12 * 16);
    ::setenv("RDMX_COLL_MEMORY", budget.c_str(), 1);
    auto comm = make_comm(env, "connect-too-much");
    const int n = comm->size();
    std::vector<std::int32_t> send(static_cast<std::size_t>(n), env.rank()), recv(static_cast<std::size_t>(n));
    std::string text;
    try {
      comm->all_to_all(send.data(), recv.data(), 1, DataType::Int32);
      FAIL_RANK() << "an all_to_all connected 15 peers of 16 local ranks with room for 12";
    } catch (const Error& e) {
      CHECK_EQ(e.code(), ErrorCode::Config) << e.what();
      text = e.what();
    }
    CHECK(contains(text, "to 13 more peers (it has 2)")) << text;
    CHECK(contains(text, "RDMX_COLL_MEMORY=" + budget)) << text;
    CHECK(contains(text, "lower RDMX_COLL_BUFFSIZE")) << text;
  }));
}

}  // namespace
}  // namespace rdmx::test
