// SPDX-License-Identifier: MIT
// A communicator whose buffers would not fit in its host's memory is refused
// at creation, on every rank alike, before any rank maps them, with the
// figures and the settings that change them; at a size that fits it works.
#include <stdlib.h>

#include <regex>
#include <string>

#include "coll/coll_support.hpp"
#include "support/text.hpp"

namespace rdmx::test {
namespace {

// 8 ranks at the default 4 MiB map about 8 MiB per peer, 66 MiB per rank,
// 528 MiB on the host: RDMX_COLL_MEMORY=64M stands for a host with 64 MiB.
TEST(CommMemory, BuffersBeyondTheHostsMemoryAreRefusedAtCreation) {
  ASSERT_TRUE(run_coll_ranks({"shm", 8}, [](RankEnv& env) {
    ::setenv("RDMX_COLL_MEMORY", "64M", 1);
    ::unsetenv("RDMX_COLL_BUFFSIZE");
    std::string text;
    try {
      make_comm(env, "too-big");
      FAIL_RANK() << "a communicator of 8 ranks with 528 MiB of buffers was created in 64 MiB";
    } catch (const Error& e) {
      CHECK_EQ(e.code(), ErrorCode::Config) << e.what();
      text = e.what();
    }
    CHECK(contains(text, "the collectives' buffers of the 8 ranks on host")) << text;
    CHECK(contains(text, "and it has 64 MiB available (RDMX_COLL_MEMORY=64M)")) << text;
    CHECK(contains(text, "per peer for the 8 ranks of the communicator")) << text;
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

TEST(CommMemory, TheEstimateGrowsWithTheSquareOfTheLocalRanks) {
  ::setenv("RDMX_COLL_MEMORY", "23G", 1);
  ::unsetenv("RDMX_COLL_BUFFSIZE");
  const CommMemory m = comm_memory(64, 64);
  ::unsetenv("RDMX_COLL_MEMORY");
  // An inbox and a staging area of 4 MiB per peer, and half a shm segment per local peer.
  EXPECT_GE(m.per_peer, std::size_t{8} << 20);
  EXPECT_LT(m.per_peer, std::size_t{9} << 20);
  EXPECT_EQ(m.per_host, m.per_rank * 64);
  EXPECT_GT(m.per_host, std::size_t{32} << 30);
  EXPECT_EQ(m.available, std::size_t{23} << 30);
  EXPECT_FALSE(m.fits());
  EXPECT_EQ(m.fitting_buffsize, std::size_t{2} << 20);
  // Ranks spread over hosts: each host holds fewer of them.
  ::setenv("RDMX_COLL_MEMORY", "23G", 1);
  EXPECT_TRUE(comm_memory(64, 8).fits());
  ::setenv("RDMX_COLL_MEMORY", "off", 1);
  EXPECT_TRUE(comm_memory(64, 64).fits());
  ::setenv("RDMX_COLL_MEMORY", "lots", 1);
  EXPECT_THROW(comm_memory(64, 64), Error);
  ::unsetenv("RDMX_COLL_MEMORY");
}

}  // namespace
}  // namespace rdmx::test
