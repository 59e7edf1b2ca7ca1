// SPDX-License-Identifier: MIT
// Every rdmx subcommand, run as a user runs it: the built binary in a real
// process, small sizes and few iterations on local ranks, and its output
// checked for what the command is for. The first test lists the
// subcommands from `rdmx --help` (and each one's --help) and fails when one
// has no smoke test here, so a command added later cannot go unrun.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "json_schema.hpp"
#include "run_cli.hpp"

namespace rdmx::test {
namespace {

using nlohmann::json;
using std::chrono::seconds;

// Each subcommand, as typed, and the test below that runs it.
const std::map<std::string, std::string>& smoke_tests() {
  static const std::map<std::string, std::string> tests{
      {"info", "Info"},
      {"run", "Run"},
      {"perf", "PerfP2p"},  // perf alone only groups p2p and coll
      {"perf p2p", "PerfP2p"},
      {"perf coll", "PerfColl"},
      {"perf gpu-copy", "PerfGpuCopy"},
      {"perf fabric", "PerfFabric"},
      {"perf scale", "PerfScale"},
      {"bench", "Bench"},
      {"plan", "Plan"},
      {"plan fabrics", "PlanFabrics"},
      {"plan models", "PlanModels"},
      {"plan collective", "PlanCollective"},
      {"plan calibrate", "PlanCalibrate"},
      {"plan check", "PlanCheck"},
      {"status", "Status"},
      {"doctor", "Doctor"},
  };
  return tests;
}

bool has_line(const std::string& text, const std::string& pattern) {
  return std::regex_search(text, std::regex(pattern, std::regex::multiline));
}

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string temp_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "rdmx_smoke_" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// The subcommands `rdmx <words> --help` lists, under its "Subcommands:" heading.
std::vector<std::string> subcommands_of(const std::vector<std::string>& words) {
  std::vector<std::string> args = words;
  args.push_back("--help");
  const CliResult r = run_cli(args, {}, seconds(30));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<std::string> names;
  std::istringstream lines(r.out);
  bool listing = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("Subcommands:", 0) == 0) {
      listing = true;
      continue;
    }
    std::smatch m;
    if (listing && std::regex_search(line, m, std::regex(R"(^  ([a-z0-9_-]+)(\s|$))"))) {
      names.push_back(m[1]);
    } else if (listing && !line.empty() && line[0] != ' ') {
      listing = false;
    }
  }
  return names;
}

void collect_commands(const std::vector<std::string>& words, std::set<std::string>* out) {
  for (const std::string& sub : subcommands_of(words)) {
    std::vector<std::string> path = words;
    path.push_back(sub);
    std::string typed;
    for (const auto& w : path) typed += (typed.empty() ? "" : " ") + w;
    out->insert(typed);
    collect_commands(path, out);
  }
}

TEST(Smoke, EverySubcommandHasASmokeTest) {
  std::set<std::string> commands;
  collect_commands({}, &commands);
  for (const char* known : {"info", "run", "perf p2p", "perf coll", "bench", "plan", "plan models"}) {
    EXPECT_TRUE(commands.contains(known)) << "rdmx --help no longer lists '" << known << "'";
  }
  std::set<std::string> tests_here;
  const ::testing::TestSuite* suite = ::testing::UnitTest::GetInstance()->current_test_suite();
  for (int i = 0; i < suite->total_test_count(); ++i) tests_here.insert(suite->GetTestInfo(i)->name());
  for (const std::string& command : commands) {
    const auto it = smoke_tests().find(command);
    if (it == smoke_tests().end()) {
      ADD_FAILURE() << "'rdmx " << command << "' has no smoke test: add one to tests/tools/smoke_test.cpp";
    } else {
      EXPECT_TRUE(tests_here.contains(it->second)) << "Smoke." << it->second << " (for rdmx " << command << ") is gone";
    }
  }
  for (const auto& [command, test] : smoke_tests()) {
    EXPECT_TRUE(commands.contains(command)) << "rdmx " << command << " is no longer a subcommand";
  }
}

TEST(Smoke, Info) {
  const CliResult r = run_cli({"info"}, {}, seconds(60));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(has_line(r.out, R"(^Providers)")) << r.out;
  EXPECT_TRUE(has_line(r.out, R"(^  shm +usable)")) << r.out;
  EXPECT_TRUE(has_line(r.out, R"(^  tcp +usable)")) << r.out;
  EXPECT_TRUE(has_line(r.out, R"(^  RDMX_TIMEOUT +)")) << r.out;
}

// Two local ranks share one host: no link between hosts to measure, and the
// sweep says so (tests/bed/fabric_bed_test.sh measures real links).
TEST(Smoke, PerfFabric) {
  const CliResult r = run_cli({"perf", "fabric", "--np", "2", "--seconds", "0.05"}, {}, seconds(90));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "# rdmx perf fabric: 2 ranks on 1 hosts, 1M messages")) << r.out;
  EXPECT_TRUE(contains(r.out, "no link between hosts")) << r.out;
}

// Inside a job of `rdmx run`, RDMX_STORE names the job's store; no
// communicator is alive, and status says so. Outside any job it asks which.
TEST(Smoke, Status) {
  const CliResult r = run_cli({"run", "-n", "1", "--time-limit", "60", "--", cli_path(), "status"}, {}, seconds(90));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "no rank status in this store")) << r.out;
  const CliResult lost =
      run_cli({"status"}, {{"RDMX_STORE", ""}, {"MASTER_ADDR", ""}, {"MASTER_PORT", ""}}, seconds(30));
  EXPECT_EQ(lost.exit_code, 1) << lost.out << lost.err;
  EXPECT_TRUE(contains(lost.err, "which job? no --store, and RDMX_STORE is unset")) << lost.err;
}

// Two local ranks: one host, spoken for once, with no other host to probe
// (tests/bed/doctor_bed_test.sh probes real hosts).
TEST(Smoke, Doctor) {
  const CliResult r = run_cli({"doctor", "--np", "2"}, {}, seconds(60));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "# rdmx doctor: 2 ranks on 1 hosts")) << r.out;
  EXPECT_TRUE(contains(r.out, "(ranks 0 1): ranks listen on ")) << r.out;
  EXPECT_TRUE(contains(r.out, "No problems found.")) << r.out;
}

TEST(Smoke, Run) {
  const CliResult r = run_cli(
      {"run", "-n", "2", "--time-limit", "60", "--", "/bin/sh", "-c", "echo rank $RDMX_RANK of $RDMX_WORLD_SIZE"}, {},
      seconds(90));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(has_line(r.out, R"(^\[0\] rank 0 of 2$)")) << r.out;
  EXPECT_TRUE(has_line(r.out, R"(^\[1\] rank 1 of 2$)")) << r.out;
  const CliResult quiet = run_cli({"run", "-n", "2", "--", "/bin/true"}, {}, seconds(60));
  EXPECT_EQ(quiet.exit_code, 0) << quiet.out << quiet.err;
}

// Two ranks (perf p2p starts them itself), one tiny latency and one bandwidth test.
TEST(Smoke, PerfP2p) {
  const CliResult r = run_cli(
      {"perf", "p2p", "write_lat,write_bw", "--provider", "tcp", "-s", "8", "-n", "64", "--warmup", "8", "-t", "8"}, {},
      seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("RDMA_Write Latency Test"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("RDMA_Write BW Test"), std::string::npos) << r.out;
  EXPECT_TRUE(has_line(r.out, R"(^ *#bytes +#iterations +t_min\[usec\])")) << r.out;
  EXPECT_TRUE(has_line(r.out, R"(^ *#bytes +#iterations +BW peak\[MB/sec\])")) << r.out;
  const std::string out = r.out;
  int found = 0;
  const std::regex row(R"((^|\n) *8 +64 +[0-9.]+ )");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), row); it != std::sregex_iterator(); ++it) ++found;
  EXPECT_EQ(found, 2) << "one row of 8 bytes x 64 iterations per test:\n" << r.out;
}

TEST(Smoke, PerfColl) {
  const CliResult r = run_cli({"perf", "coll", "all_reduce", "--np", "2", "-b", "8", "-e", "64", "-n", "3", "-w", "1"},
                              {}, seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* size : {"8", "16", "32", "64"}) {
    EXPECT_TRUE(has_line(r.out, std::string("^ +") + size + R"( +\d+ +float +sum )")) << "no row of " << size << ":\n"
                                                                                      << r.out;
  }
  EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << r.out;
}

// Three local ranks: every figure of the document is there and plausible
// (bench/scale/run.sh sweeps the rank counts).
TEST(Smoke, PerfScale) {
  const CliResult r =
      run_cli({"perf", "scale", "--np", "3", "--sizes", "4,64K", "-n", "5", "--json"}, {}, seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json doc = json::parse(r.out);
  expect_valid(doc, "perf_scale.schema.json");
  EXPECT_EQ(doc["np"], 3);
  EXPECT_EQ(doc["hosts"], 1);
  EXPECT_GT(doc["create"]["seconds"].get<double>(), 0) << r.out;
  EXPECT_GE(doc["connections_per_rank"]["min"].get<double>(), 1) << r.out;
  EXPECT_LE(doc["connections_per_rank"]["max"].get<double>(), 2) << r.out;
  EXPECT_GE(doc["store_requests"]["create_total"].get<double>(), 3) << r.out;
  EXPECT_GT(doc["memory_per_rank"]["pss_after_create_max"].get<double>(), 0) << r.out;
  ASSERT_EQ(doc["all_reduce"].size(), 2u) << r.out;
  EXPECT_EQ(doc["all_reduce"][1]["bytes"], 65536);
  EXPECT_GT(doc["all_reduce"][1]["busbw_GBps"].get<double>(), 0) << r.out;
}

// On the simulated CUDA driver (tests/cuda_sim), so that every host runs it.
TEST(Smoke, PerfGpuCopy) {
  const CliResult r = run_cli({"perf", "gpu-copy", "-b", "8", "-e", "64K", "-n", "3"},
                              {{"LD_LIBRARY_PATH", RDMX_SIMULATED_CUDA_DIR}}, seconds(60));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(has_line(r.out, R"(^# rdmx perf gpu-copy: GPU 0 )")) << r.out;
  for (const char* size : {"8", "1024", "65536"}) {
    EXPECT_TRUE(has_line(r.out, std::string("^ +") + size + R"( +3 +[0-9.]+ +[0-9.]+ +OK$)"))
        << "no row of " << size << ":\n"
        << r.out;
  }
}

// The bench's quick mode on one provider: its summary, files and report.
TEST(Smoke, Bench) {
  const std::string dir = temp_dir("bench");
  const CliResult r = run_cli({"bench", "--quick", "--providers", "tcp", "--np", "2", "--out", dir}, {}, seconds(240));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(has_line(r.out, R"(^tcp )")) << r.out;
  const json doc = json::parse(slurp(dir + "/results.json"));
  EXPECT_TRUE(doc["errors"].empty()) << doc["errors"].dump(2);
  EXPECT_EQ(slurp(dir + "/report.html").rfind("<!DOCTYPE html>", 0), 0u);
  std::filesystem::remove_all(dir);
}

TEST(Smoke, Plan) {
  const CliResult r =
      run_cli({"plan", "--model", "bert-large", "--nodes", "2,4", "--fabrics", "ib-ndr,tcp-25"}, {}, seconds(60));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("ib-ndr (8x400G): "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tcp-25 (8x400G): "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("recommended: "), std::string::npos) << r.out;
}

TEST(Smoke, PlanFabrics) {
  const CliResult r = run_cli({"plan", "fabrics"}, {}, seconds(30));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json file = json::parse(slurp(source_path("tools/rdmx/plan/data/fabrics.json")));
  ASSERT_FALSE(file["fabrics"].empty());
  for (const auto& [name, fabric] : file["fabrics"].items()) {
    EXPECT_TRUE(has_line(r.out, "^" + name + " ")) << "fabric " << name << " not listed:\n" << r.out;
  }
}

// `rdmx plan models` printed nothing (its loop ran over a destroyed temporary).
TEST(Smoke, PlanModels) {
  const CliResult r = run_cli({"plan", "models"}, {}, seconds(30));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json file = json::parse(slurp(source_path("tools/rdmx/plan/data/models.json")));
  ASSERT_FALSE(file["models"].empty());
  for (const auto& [name, model] : file["models"].items()) {
    EXPECT_TRUE(has_line(r.out, "^" + name + " +[0-9.]+M parameters")) << "preset " << name << " not listed:\n"
                                                                       << r.out;
  }
  // A file of the user's own presets is listed the same way.
  const std::string dir = temp_dir("models");
  json mine = json::object();
  mine["models"]["tiny-net"] = file["models"].begin().value();
  std::ofstream(dir + "/models.json") << mine.dump(2);
  const CliResult own = run_cli({"plan", "models", "--models-file", dir + "/models.json"}, {}, seconds(30));
  ASSERT_EQ(own.exit_code, 0) << own.out << own.err;
  EXPECT_TRUE(has_line(own.out, R"(^tiny-net +[0-9.]+M parameters)")) << own.out;
  std::filesystem::remove_all(dir);
}

TEST(Smoke, PlanCollective) {
  const CliResult r =
      run_cli({"plan", "collective", "--fabric", "ib-ndr", "--nodes", "2", "--gpus-per-node", "4", "--sizes", "1M,4M"},
              {}, seconds(30));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(has_line(r.out, R"(^# all_reduce on ib-ndr, 2 x 4 ranks)")) << r.out;
  EXPECT_TRUE(has_line(r.out, R"(^ +1048576 +\S+ +\S+ +[0-9.]+ +[0-9.]+ +[0-9.]+$)")) << r.out;
  EXPECT_TRUE(has_line(r.out, R"(^ +4194304 +\S+ +\S+ +[0-9.]+ +[0-9.]+ +[0-9.]+$)")) << r.out;
}

TEST(Smoke, PlanCheck) {
  const CliResult r =
      run_cli({"plan", "check", "--model", "bert-large", "--nodes", "4", "--claim", "tcp-100=1000"}, {}, seconds(30));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(has_line(r.out, R"(^# rdmx plan check: bert-large on 4 x 8 GPUs)")) << r.out;
  EXPECT_TRUE(has_line(r.out, R"(^tcp-100 +1000\.0 +[0-9.]+ +[0-9.]+$)")) << r.out;
  EXPECT_TRUE(has_line(r.out, R"(^  fits: implies [0-9.]+ GB/s per node)")) << r.out;
}

// nccl-tests users sweep to 8-16 GiB: plan models any size up to 1 TiB,
// where the commands that allocate their buffers stop at 4 GiB.
TEST(Smoke, PlanCollectiveModelsSizesBeyondFourGibibytes) {
  const CliResult r =
      run_cli({"plan", "collective", "--fabric", "ib-ndr", "--nodes", "2", "--gpus-per-node", "8", "--sizes", "8G,16G"},
              {}, seconds(30));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(has_line(r.out, R"(^ +8589934592 +\S+ +\S+ +[0-9.]+ +[0-9.]+ +[0-9.]+$)")) << r.out;
  EXPECT_TRUE(has_line(r.out, R"(^ +17179869184 +\S+ +\S+ +[0-9.]+ +[0-9.]+ +[0-9.]+$)")) << r.out;
  const CliResult range = run_cli({"plan", "collective", "--sizes", "4G..16G", "--json"}, {}, seconds(30));
  ASSERT_EQ(range.exit_code, 0) << range.out << range.err;
  EXPECT_EQ(std::count(range.out.begin(), range.out.end(), '\n'), 3) << range.out;

  const CliResult beyond = run_cli({"plan", "collective", "--sizes", "2048G"}, {}, seconds(30));
  EXPECT_EQ(beyond.exit_code, 2) << beyond.out << beyond.err;
  EXPECT_NE(beyond.err.find("--sizes: 2048G is larger than 1024 GiB"), std::string::npos) << beyond.err;
  // A count whose shift would wrap to a small size is refused, not run.
  const CliResult wrapped = run_cli({"plan", "collective", "--sizes", "999999999999G"}, {}, seconds(30));
  EXPECT_EQ(wrapped.exit_code, 2) << wrapped.out << wrapped.err;
  EXPECT_NE(wrapped.err.find("is larger than 1024 GiB"), std::string::npos) << wrapped.err;
  const CliResult buffer = run_cli({"perf", "coll", "all_reduce", "--np", "2", "--sizes", "8G"}, {}, seconds(30));
  EXPECT_EQ(buffer.exit_code, 2) << buffer.out << buffer.err;
  EXPECT_NE(buffer.err.find("--sizes: 8G is larger than 4 GiB, the most a buffer here may hold"), std::string::npos)
      << buffer.err;
}

// calibrate measures between hosts: under rdmx run, RDMX_HOSTID makes each
// of two local ranks a host of its own, so the whole measurement runs and
// writes a profile that rdmx plan reads back.
TEST(Smoke, PlanCalibrate) {
  const std::string dir = temp_dir("calibrate");
  const std::string profile = dir + "/mine.json";
  const std::string command = std::string("RDMX_HOSTID=smoke-host-$RDMX_RANK exec ") + cli_path() +
                              " plan calibrate --seconds 0.1 --small 8 --large 64K,8M --name smoke --out " + profile;
  const CliResult r = run_cli({"run", "-n", "2", "--time-limit", "120", "--", "/bin/sh", "-c", command},
                              {{"RDMX_PROVIDER", "tcp"}}, seconds(150));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(has_line(r.out, R"(^\[0\] fabric smoke: latency [0-9.]+ us)")) << r.out;
  const json written = json::parse(slurp(profile));
  EXPECT_TRUE(written["fabrics"].contains("smoke")) << written.dump(2);
  const CliResult listed = run_cli({"plan", "fabrics", "--fabric-file", profile}, {}, seconds(30));
  ASSERT_EQ(listed.exit_code, 0) << listed.out << listed.err;
  EXPECT_TRUE(has_line(listed.out, R"(^smoke )")) << listed.out;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace rdmx::test
