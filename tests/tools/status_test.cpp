// SPDX-License-Identifier: MIT
// `rdmx status` against running jobs: real ranks publish their status into
// the job's store while a fourth process reads it with the real binary.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "json_schema.hpp"
#include "rdmx/comm.hpp"
#include "run_cli.hpp"
#include "support/harness.hpp"
#include "support/scoped_env.hpp"

namespace rdmx::test {
namespace {

using nlohmann::json;

constexpr int kJobRanks = 3;
constexpr int kObserver = kJobRanks;  // the extra process that runs rdmx status
constexpr int kSteps = 6;
constexpr int kStraggler = 2;  // enters every step late
constexpr int kStalled = 1;    // then stays out of the next collective

void all_reduce(Communicator& comm) {
  std::vector<float> buf(4096, 1.0f);
  comm.all_reduce(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::Sum);
}

// A rank of the job: kSteps all_reduces, each entered late by kStraggler;
// then kStalled waits for the observer before the last one, which the
// others enter at once.
void job_rank(RankEnv& env) {
  CommOptions options;
  options.provider = "shm";
  options.tag = "status-job";
  options.timeout = std::chrono::milliseconds(30'000);
  auto comm = Communicator::create(env.store_ptr(), env.rank(), env.world_size() - 1, options);
  for (int step = 0; step < kSteps; ++step) {
    if (env.rank() == kStraggler) std::this_thread::sleep_for(std::chrono::milliseconds(120));
    all_reduce(*comm);
  }
  if (env.rank() == kStalled) {
    env.store().set("observe", std::string_view("1"));
    env.store().get("observed", std::chrono::milliseconds(30'000));
  }
  all_reduce(*comm);
}

json status_json(const std::string& store) {
  const CliResult r = run_cli({"status", "--store", store, "--json"}, {}, std::chrono::seconds(30));
  CHECK_EQ(r.exit_code, 0) << r.err;
  return json::parse(r.out);
}

// The view once the stalled rank has stayed out for a while and every
// rank's record shows the collective it is in.
json stalled_view(const std::string& store) {
  json doc;
  for (int attempt = 0; attempt < 100; ++attempt) {
    doc = status_json(store);
    if (doc["communicators"].size() == 1) {
      const json& comm = doc["communicators"][0];
      const json& busy = comm["under_way"];
      if (comm["ranks"].size() == kJobRanks && busy.is_object() && busy["not_called"] == json::array({kStalled}) &&
          busy["in_it"].size() == kJobRanks - 1 && comm["ranks"][kStalled]["seconds"].get<double>() >= 0.5) {
        return doc;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(false) << "the job never showed rank " << kStalled << " out of the collective under way: " << doc.dump(1);
  return doc;
}

void observer(RankEnv& env) {
  const std::string store = "file:" + env.dir() + "/store";  // the harness's file store
  env.store().get("observe", std::chrono::milliseconds(30'000));
  const json doc = stalled_view(store);
  const std::vector<std::string> errors = validate_json(doc, load_schema("status.schema.json"));
  CHECK(errors.empty()) << errors.front() << "\n" << doc.dump(1);
  const json& comm = doc["communicators"][0];
  CHECK_EQ(comm["tag"], "status-job");
  CHECK_EQ(comm["size"], kJobRanks);
  for (const json& rank : comm["ranks"]) {
    CHECK_EQ(rank["state"], rank["rank"] == kStalled ? "outside" : "inside") << rank.dump();
    CHECK(!rank["host"].get<std::string>().empty());
  }
  CHECK(comm["slowest"].is_object()) << comm.dump(1);
  CHECK_EQ(comm["slowest"]["rank"], kStraggler) << comm.dump(1);
  CHECK_GE(comm["slowest"]["entered_last"].get<int>(), kSteps / 2) << comm.dump(1);
  CHECK_GE(comm["slowest"]["held_ms"].get<int>(), 50 * kSteps / 2) << comm.dump(1);

  const CliResult text = run_cli({"status", "--store", store}, {}, std::chrono::seconds(30));
  CHECK_EQ(text.exit_code, 0) << text.err;
  CHECK(contains(text.out, "communicator 'status-job': 3 ranks on 1 host(s)")) << text.out;
  CHECK(contains(text.out, "NOT CALLED by ranks 1")) << text.out;
  CHECK(contains(text.out, "slowest rank of the last")) << text.out;
  CHECK(contains(text.out, "collectives: rank 2 (")) << text.out;

  const CliResult watch =
      run_cli({"status", "--store", store, "--watch", "0.2", "--count", "2"}, {}, std::chrono::seconds(30));
  CHECK_EQ(watch.exit_code, 0) << watch.err;
  CHECK_EQ(occurrences(watch.out, "communicator 'status-job'"), 2u) << watch.out;
  CHECK(contains(watch.out, "(view 2, every 0.2 s)")) << watch.out;
  env.store().set("observed", std::string_view("1"));
}

TEST(StatusCommand, ShowsTheCollectiveUnderWayWhoHasNotCalledItAndTheStraggler) {
  ScopedEnv interval("RDMX_STATUS_INTERVAL", "100ms");
  Options options;
  options.provider = "shm";
  options.timeout = std::chrono::milliseconds(120'000);
  ASSERT_TRUE(run_ranks(
      kJobRanks + 1, Placement::Local,
      [](RankEnv& env) {
        if (env.rank() == kObserver) {
          observer(env);
        } else {
          job_rank(env);
        }
      },
      options));
}

// With authentication on, the store serves only the job's secret: rdmx
// status without it is refused and says what to set; with it, it reads the
// live communicator's record over TCP.
TEST(StatusCommand, IsRefusedWithoutTheJobsSecret) {
  constexpr const char* kSecret = "5f1d0c9a8b7e6d5c4b3a29180716253443526170819a0b1c2d3e4f5a6b7c8d9e";
  ScopedEnv key("RDMX_AUTH_KEY", kSecret);
  ScopedEnv interval("RDMX_STATUS_INTERVAL", "100ms");
  TcpStoreServer server("127.0.0.1", 0);
  const std::string address = "127.0.0.1:" + std::to_string(server.port());
  std::shared_ptr<Store> store = connect_tcp_store("127.0.0.1", server.port(), std::chrono::seconds(10));
  CommOptions options;
  options.tag = "alone";
  auto comm = Communicator::create(store, 0, 1, options);
  all_reduce(*comm);
  for (int i = 0; i < 100 && !store->check("alone/status/0"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

  const CliResult refused = run_cli({"status", "--store", address}, {{"RDMX_AUTH_KEY", ""}}, std::chrono::seconds(30));
  EXPECT_EQ(refused.exit_code, 1) << refused.out << refused.err;
  EXPECT_TRUE(contains(refused.err, "cannot read the store at " + address)) << refused.err;
  EXPECT_TRUE(contains(refused.err, "export the job's RDMX_AUTH_KEY")) << refused.err;
  EXPECT_EQ(refused.out, "");

  const CliResult served = run_cli({"status", "--store", address}, {}, std::chrono::seconds(30));
  EXPECT_EQ(served.exit_code, 0) << served.err;
  EXPECT_TRUE(contains(served.out, "communicator 'alone': 1 ranks on 1 host(s)")) << served.out;
  EXPECT_TRUE(contains(served.out, "out of rdmx for")) << served.out;
  EXPECT_TRUE(contains(served.out, "(last: all_reduce #")) << served.out;
}

TEST(StatusCommand, AStoreWithNoJobSaysSo) {
  std::string dir = ::testing::TempDir() + "rdmx_status_empty_XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const CliResult r = run_cli({"status", "--store", "file:" + dir}, {}, std::chrono::seconds(30));
  ::rmdir(dir.c_str());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "no rank status in this store")) << r.out;
}

}  // namespace
}  // namespace rdmx::test
