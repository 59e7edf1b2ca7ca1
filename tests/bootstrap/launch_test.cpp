// SPDX-License-Identifier: MIT
// Launcher detection and from_env().
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <cstdlib>
#include <map>
#include <optional>

#include "bootstrap/launch_variables.hpp"
#include "process_util.hpp"
#include "rdmx/bootstrap.hpp"
#include "services/config.hpp"
#include "support/text.hpp"

namespace rdmx {
namespace {

using test::contains;

using namespace std::chrono_literals;
using test::spawn;
using test::TempDir;
using test::wait_exit;

// The guard clears every variable detect_launch() reads (the test may
// itself run under Slurm or MPI) and restores them afterwards.
using bootstrap::kLaunchVariables;

class LaunchEnv {
 public:
  explicit LaunchEnv(const std::map<std::string, std::string>& values) {
    for (const char* name : kLaunchVariables) {
      const char* old = std::getenv(name);
      saved_[name] = old != nullptr ? std::optional<std::string>(old) : std::nullopt;
      ::unsetenv(name);
    }
    for (const auto& [name, value] : values) ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~LaunchEnv() {
    for (const auto& [name, value] : saved_) {
      if (value)
        ::setenv(name.c_str(), value->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    }
  }
  LaunchEnv(const LaunchEnv&) = delete;
  LaunchEnv& operator=(const LaunchEnv&) = delete;

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

// The Config error detect_launch() throws for this environment.
std::string config_error(const std::map<std::string, std::string>& values) {
  LaunchEnv env(values);
  try {
    detect_launch();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Config) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "detect_launch() accepted the environment";
  return {};
}

TEST(DetectLaunch, RdmxVariables) {
  LaunchEnv env({{"RDMX_RANK", "2"},
                 {"RDMX_WORLD_SIZE", "4"},
                 {"RDMX_LOCAL_RANK", "0"},
                 {"RDMX_LOCAL_WORLD_SIZE", "2"},
                 {"RDMX_STORE", "node0:29500"}});
  LaunchInfo info = detect_launch();
  EXPECT_EQ(info.launcher, "rdmx");
  EXPECT_EQ(info.rank, 2);
  EXPECT_EQ(info.world_size, 4);
  EXPECT_EQ(info.local_rank, 0);
  EXPECT_EQ(info.local_world_size, 2);
  EXPECT_EQ(info.store_host, "node0");
  EXPECT_EQ(info.store_port, 29500);
  EXPECT_TRUE(info.store_file.empty());
}

TEST(DetectLaunch, StoreAddressForms) {
  {
    LaunchEnv env({{"RDMX_RANK", "0"}, {"RDMX_WORLD_SIZE", "1"}, {"RDMX_STORE", "[fd00::1]:1234"}});
    LaunchInfo info = detect_launch();
    EXPECT_EQ(info.store_host, "fd00::1");
    EXPECT_EQ(info.store_port, 1234);
    EXPECT_EQ(info.local_rank, -1);
    EXPECT_EQ(info.local_world_size, -1);
  }
  {
    LaunchEnv env({{"RDMX_RANK", "0"}, {"RDMX_WORLD_SIZE", "1"}, {"RDMX_STORE", "file:/shared/job 7"}});
    LaunchInfo info = detect_launch();
    EXPECT_EQ(info.store_file, "/shared/job 7");
    EXPECT_TRUE(info.store_host.empty());
  }
  {
    // No store at all is not detect_launch()'s problem (from_env() says so).
    LaunchEnv env({{"RDMX_RANK", "0"}, {"RDMX_WORLD_SIZE", "1"}});
    LaunchInfo info = detect_launch();
    EXPECT_TRUE(info.store_host.empty());
    EXPECT_TRUE(info.store_file.empty());
  }
}

TEST(DetectLaunch, Torchrun) {
  LaunchEnv env({{"RANK", "5"},
                 {"WORLD_SIZE", "8"},
                 {"LOCAL_RANK", "1"},
                 {"LOCAL_WORLD_SIZE", "4"},
                 {"MASTER_ADDR", "10.1.2.3"},
                 {"MASTER_PORT", "29400"}});
  LaunchInfo info = detect_launch();
  EXPECT_EQ(info.launcher, "torchrun");
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_world_size, 4);
  EXPECT_EQ(info.store_host, "10.1.2.3");
  EXPECT_EQ(info.store_port, 29401);  // MASTER_PORT+1: torchrun's agent holds MASTER_PORT
}

TEST(DetectLaunch, OpenMpi) {
  LaunchEnv env({{"OMPI_COMM_WORLD_RANK", "3"},
                 {"OMPI_COMM_WORLD_SIZE", "16"},
                 {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "8"},
                 {"RDMX_STORE", "head:7000"}});
  LaunchInfo info = detect_launch();
  EXPECT_EQ(info.launcher, "openmpi");
  EXPECT_EQ(info.rank, 3);
  EXPECT_EQ(info.world_size, 16);
  EXPECT_EQ(info.local_rank, 3);
  EXPECT_EQ(info.local_world_size, 8);
  EXPECT_EQ(info.store_host, "head");
}

TEST(DetectLaunch, Mpich) {
  LaunchEnv env({{"PMI_RANK", "1"},
                 {"PMI_SIZE", "2"},
                 {"MPI_LOCALRANKID", "1"},
                 {"MPI_LOCALNRANKS", "2"},
                 {"MASTER_ADDR", "h"},
                 {"MASTER_PORT", "1"}});
  LaunchInfo info = detect_launch();
  EXPECT_EQ(info.launcher, "mpich");
  EXPECT_EQ(info.rank, 1);
  EXPECT_EQ(info.world_size, 2);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_world_size, 2);
}

TEST(DetectLaunch, Slurm) {
  // Two tasks on each of three nodes, then one: node 3 runs one task.
  LaunchEnv env({{"SLURM_PROCID", "6"},
                 {"SLURM_NTASKS", "7"},
                 {"SLURM_LOCALID", "0"},
                 {"SLURM_TASKS_PER_NODE", "2(x3),1"},
                 {"SLURM_NODEID", "3"}});
  LaunchInfo info = detect_launch();
  EXPECT_EQ(info.launcher, "slurm");
  EXPECT_EQ(info.rank, 6);
  EXPECT_EQ(info.world_size, 7);
  EXPECT_EQ(info.local_rank, 0);
  EXPECT_EQ(info.local_world_size, 1);
}

TEST(DetectLaunch, SlurmLocalSizeFromRepeatedCounts) {
  LaunchEnv env({{"SLURM_PROCID", "3"},
                 {"SLURM_NPROCS", "8"},
                 {"SLURM_LOCALID", "1"},
                 {"SLURM_TASKS_PER_NODE", "4(x2)"},
                 {"SLURM_NODEID", "1"}});
  LaunchInfo info = detect_launch();
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.local_world_size, 4);
}

TEST(DetectLaunch, SlurmPrefersTheStepLayoutAndNeedsTheNodeId) {
  {
    LaunchEnv env({{"SLURM_PROCID", "0"},
                   {"SLURM_NTASKS", "4"},
                   {"SLURM_TASKS_PER_NODE", "8(x2)"},
                   {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
                   {"SLURM_NODEID", "0"}});
    EXPECT_EQ(detect_launch().local_world_size, 2);
  }
  {
    LaunchEnv env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_TASKS_PER_NODE", "2(x2)"}});
    EXPECT_EQ(detect_launch().local_world_size, -1);
  }
}

TEST(DetectLaunch, Precedence) {
  std::map<std::string, std::string> all = {
      {"RDMX_RANK", "1"},
      {"RDMX_WORLD_SIZE", "2"},
      {"RANK", "2"},
      {"WORLD_SIZE", "3"},
      {"OMPI_COMM_WORLD_RANK", "3"},
      {"OMPI_COMM_WORLD_SIZE", "4"},
      {"PMI_RANK", "4"},
      {"PMI_SIZE", "5"},
      {"SLURM_PROCID", "5"},
      {"SLURM_NTASKS", "6"},
  };
  const std::pair<const char*, int> order[] = {
      {"rdmx", 1}, {"torchrun", 2}, {"openmpi", 3}, {"mpich", 4}, {"slurm", 5}};
  const std::vector<std::vector<const char*>> remove_before = {{},
                                                               {"RDMX_RANK", "RDMX_WORLD_SIZE"},
                                                               {"RANK", "WORLD_SIZE"},
                                                               {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                                               {"PMI_RANK", "PMI_SIZE"}};
  for (std::size_t i = 0; i < std::size(order); ++i) {
    for (const char* name : remove_before[i]) all.erase(name);
    LaunchEnv env(all);
    LaunchInfo info = detect_launch();
    EXPECT_EQ(info.launcher, order[i].first);
    EXPECT_EQ(info.rank, order[i].second);
  }
}

TEST(DetectLaunch, RdmxStoreOverridesMasterAddr) {
  LaunchEnv env(
      {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}, {"RDMX_STORE", "b:2"}});
  LaunchInfo info = detect_launch();
  EXPECT_EQ(info.store_host, "b");
  EXPECT_EQ(info.store_port, 2);
}

TEST(DetectLaunch, NoLauncherNamesWhatItLookedFor) {
  std::string what = config_error({});
  EXPECT_TRUE(contains(what, "no launcher recognised")) << what;
  for (const char* name : {"RDMX_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    EXPECT_TRUE(contains(what, name)) << what;
  }
  EXPECT_TRUE(contains(what, "hint:")) << what;
}

// A program started on its own is the first thing a new user tries: the
// error says how to start it as a job instead.
TEST(DetectLaunch, NoLauncherSuggestsRdmxRun) {
  std::string what = config_error({});
  EXPECT_TRUE(contains(what, "rdmx run -n N -- CMD")) << what;
  EXPECT_TRUE(contains(what, "rdmx run -n 2 -- ")) << what;
  EXPECT_TRUE(contains(what, "was it started on its own?")) << what;
}

TEST(DetectLaunch, MissingWorldSizeIsNamed) {
  std::string what = config_error({{"RDMX_RANK", "0"}, {"RDMX_STORE", "h:1"}});
  EXPECT_TRUE(contains(what, "launcher rdmx recognised")) << what;
  EXPECT_TRUE(contains(what, "missing: RDMX_WORLD_SIZE")) << what;
  what = config_error({{"OMPI_COMM_WORLD_SIZE", "4"}});
  EXPECT_TRUE(contains(what, "Open MPI")) << what;
  EXPECT_TRUE(contains(what, "missing: OMPI_COMM_WORLD_RANK")) << what;
  what = config_error({{"SLURM_PROCID", "0"}});
  EXPECT_TRUE(contains(what, "Slurm")) << what;
  EXPECT_TRUE(contains(what, "SLURM_NTASKS")) << what;
}

TEST(DetectLaunch, MalformedValuesAreNamedWithTheirValue) {
  std::string what = config_error({{"RANK", "abc"}, {"WORLD_SIZE", "-2"}});
  EXPECT_TRUE(contains(what, "torchrun")) << what;
  EXPECT_TRUE(contains(what, "RANK=\"abc\"")) << what;
  EXPECT_TRUE(contains(what, "WORLD_SIZE=\"-2\"")) << what;
  what = config_error({{"RDMX_RANK", "4"}, {"RDMX_WORLD_SIZE", "4"}});
  EXPECT_TRUE(contains(what, "rank 4 >= world size 4")) << what;
  what = config_error({{"RDMX_RANK", "0"}, {"RDMX_WORLD_SIZE", "2"}, {"RDMX_STORE", "no-port"}});
  EXPECT_TRUE(contains(what, "RDMX_STORE=\"no-port\"")) << what;
  what = config_error({{"RDMX_RANK", "0"}, {"RDMX_WORLD_SIZE", "2"}, {"RDMX_STORE", "fd00::1:80"}});
  EXPECT_TRUE(contains(what, "brackets")) << what;
  what = config_error({{"RDMX_RANK", "0"}, {"RDMX_WORLD_SIZE", "2"}, {"RDMX_STORE", "h:70000"}});
  EXPECT_TRUE(contains(what, "RDMX_STORE=\"h:70000\"")) << what;
  what = config_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}});
  EXPECT_TRUE(contains(what, "missing: MASTER_PORT")) << what;
  what = config_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "x"}});
  EXPECT_TRUE(contains(what, "MASTER_PORT=\"x\"")) << what;
}

TEST(FromEnv, MissingStoreNamesTheVariablesAndLauncher) {
  LaunchEnv env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  try {
    from_env();
    FAIL() << "from_env() without a store returned";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_EQ(e.code(), ErrorCode::Config) << what;
    EXPECT_TRUE(contains(what, "openmpi")) << what;
    EXPECT_TRUE(contains(what, "RDMX_STORE")) << what;
    EXPECT_TRUE(contains(what, "MASTER_ADDR")) << what;
    EXPECT_TRUE(contains(what, "export RDMX_STORE=host:port")) << what;
  }
}

TEST(FromEnv, TorchrunStoreUsesThePortAfterMasterPort) {
  // torchrun's agent serves torch's TCPStore on MASTER_PORT: rdmx must not collide with it.
  TcpStoreServer occupant("127.0.0.1", 0);
  if (occupant.port() == 65535) GTEST_SKIP() << "ephemeral port 65535 leaves no port after it";
  LaunchEnv env({{"RANK", "0"},
                 {"WORLD_SIZE", "1"},
                 {"MASTER_ADDR", "127.0.0.1"},
                 {"MASTER_PORT", std::to_string(occupant.port())}});
  try {
    Bootstrap joined = from_env();
    EXPECT_EQ(joined.info.store_port, occupant.port() + 1);
    ASSERT_NE(joined.server, nullptr);
    EXPECT_EQ(joined.server->port(), occupant.port() + 1);
  } catch (const Error& e) {
    // Only acceptable if MASTER_PORT+1 happened to be taken; then the hint must say what to do.
    std::string what = e.what();
    EXPECT_TRUE(contains(what, "MASTER_PORT+1")) << what;
    EXPECT_TRUE(contains(what, "export RDMX_STORE=127.0.0.1:<a free port>")) << what;
  }
  core::set_current_rank(-1);
}

// Runs `ranks` processes through from_env() with the given store and checks
// they see one shared store, that only rank 0 serves, and that each one's
// current rank is set.
void join_ranks(int ranks, const std::string& store) {
  std::vector<pid_t> children;
  for (int rank = 0; rank < ranks; ++rank) {
    children.push_back(spawn([&, rank] {
      LaunchEnv env(
          {{"RDMX_RANK", std::to_string(rank)}, {"RDMX_WORLD_SIZE", std::to_string(ranks)}, {"RDMX_STORE", store}});
      Bootstrap joined = from_env();
      CHILD_REQUIRE(joined.info.rank == rank);
      CHILD_REQUIRE(core::current_rank() == rank);
      CHILD_REQUIRE(joined.store != nullptr);
      bool tcp = store.rfind("file:", 0) != 0;
      CHILD_REQUIRE((joined.server != nullptr) == (tcp && rank == 0));
      joined.store->add("joined", 1);
      joined.store->set("rank/" + std::to_string(rank), std::string_view("here"));
      std::vector<std::string> everyone;
      for (int peer = 0; peer < ranks; ++peer) everyone.push_back("rank/" + std::to_string(peer));
      joined.store->wait(everyone, 20s);
      // Each rank adds before it sets its key, so all adds are in.
      CHILD_REQUIRE(joined.store->get_string("joined") == std::to_string(ranks));
      // Rank 0 hosts the server: it leaves last, once everyone is done with it.
      if (rank != 0) {
        joined.store->set("done/" + std::to_string(rank), std::string_view("1"));
      } else {
        std::vector<std::string> done;
        for (int peer = 1; peer < ranks; ++peer) done.push_back("done/" + std::to_string(peer));
        joined.store->wait(done, 20s);
      }
      return 0;
    }));
  }
  for (pid_t child : children) EXPECT_EQ(wait_exit(child), 0);
}

TEST(FromEnv, RanksJoinThroughATcpStoreServedByRankZero) {
  join_ranks(3, "127.0.0.1:" + std::to_string(test::pick_free_port()));
}

TEST(FromEnv, RanksJoinThroughAFileStore) {
  TempDir dir;
  join_ranks(3, "file:" + dir.path() + "/store");
}

}  // namespace
}  // namespace rdmx

namespace rdmx {
namespace {

// An IPv4 address of a non-loopback interface that is up, if there is one.
std::optional<std::string> non_loopback_address() {
  ifaddrs* interfaces = nullptr;
  if (::getifaddrs(&interfaces) != 0) return std::nullopt;
  std::optional<std::string> found;
  for (ifaddrs* it = interfaces; it != nullptr && !found; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET || !(it->ifa_flags & IFF_UP)) continue;
    auto* v4 = reinterpret_cast<sockaddr_in*>(it->ifa_addr);
    if ((ntohl(v4->sin_addr.s_addr) >> 24) == 127) continue;
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text));
    found = text;
  }
  ::freeifaddrs(interfaces);
  return found;
}

TEST(FromEnv, RankZeroServesWhenTheStoreHostIsAnInterfaceAddress) {
  auto address = non_loopback_address();
  if (!address) GTEST_SKIP() << "no non-loopback IPv4 interface here";
  join_ranks(2, *address + ":" + std::to_string(test::pick_free_port()));
}

}  // namespace
}  // namespace rdmx
