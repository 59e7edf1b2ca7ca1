// SPDX-License-Identifier: MIT
// rdmx bench, the main job: a quick run end to end, its files and its summary.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "json_schema.hpp"
#include "rdmx/version.hpp"
#include "run_cli.hpp"

namespace rdmx::test {
namespace {

using nlohmann::json;

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(BenchCommand, QuickRunWritesSummaryJsonAndReport) {
  char dir_template[] = "/tmp/rdmx-bench-test.XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::filesystem::path dir = dir_template;
  const CliResult r = run_cli({"bench", "--quick", "--np", "2", "--out", dir.string()}, {}, std::chrono::seconds(240));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // The summary: one line per usable provider, and why the others are not usable. It
  // leads with WRITE latency and WRITE bandwidth beyond the last-level cache.
  // The summary leads with WRITE latency, then bandwidth beyond the last-level cache.
  const std::size_t header = r.out.find("\nprovider  write latency (typical)");
  ASSERT_NE(header, std::string::npos) << r.out;
  const std::string header_line = r.out.substr(header + 1, r.out.find('\n', header + 1) - header - 1);
  EXPECT_NE(header_line.find(" write bandwidth > LLC"), std::string::npos) << header_line;
  EXPECT_EQ(r.out.find("best latency"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nshm "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\ntcp "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("verbs     not usable: "), std::string::npos) << r.out;
  // No progress bar when stderr is not a terminal.
  EXPECT_EQ(r.err.find('\r'), std::string::npos) << r.err;
  // The caveat the report carries too (report_html_test), wrapped for the terminal.
  EXPECT_NE(r.out.find("All ranks are on this host: tcp runs over loopback"), std::string::npos) << r.out;

  const json doc = json::parse(slurp(dir / "results.json"));
  const auto problems = validate_json(doc, load_schema("bench.schema.json"));
  for (const auto& p : problems) ADD_FAILURE() << p;
  EXPECT_EQ(doc["rdmx_version"], rdmx::version());
  EXPECT_TRUE(doc["errors"].empty()) << doc["errors"].dump(2);
  const std::uint64_t llc = doc["host"]["llc_bytes"];
  EXPECT_GT(llc, 0u);
  for (const auto& s : doc["summary"]) {
    EXPECT_FALSE(s["write_latency_us"].is_null()) << s.dump();
    EXPECT_GE(s["write_latency_spread"].get<double>(), 1.0) << s.dump();
    EXPECT_FALSE(s["bw_out_of_cache_gb_s"].is_null()) << s.dump();
    EXPECT_GT(s["bw_out_of_cache_bytes"].get<std::uint64_t>(), llc) << s.dump();
    EXPECT_FALSE(s["best_latency_us"].is_null()) << s.dump();
    EXPECT_FALSE(s["best_bw_gb_s"].is_null()) << s.dump();
    EXPECT_FALSE(s["allreduce_busbw_GBps"].empty()) << s.dump();
  }
  for (const auto& run : doc["coll"]) {
    for (const auto& row : run["results"]) EXPECT_EQ(row["wrong"], 0);
  }
  const std::string html = slurp(dir / "report.html");
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// On a terminal the bench draws a progress bar on stderr: script(1) gives it one.
TEST(BenchCommand, ProgressBarOnlyOnATerminal) {
  if (::access("/usr/bin/script", X_OK) != 0) GTEST_SKIP() << "script(1) (util-linux) is not installed";
  char dir_template[] = "/tmp/rdmx-bench-pty.XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string command = std::string("timeout 120 /usr/bin/script -qec '") + cli_path() +
                              " bench --quick --providers tcp --out " + dir_template + "' /dev/null";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string terminal;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) terminal.append(buffer, n);
  const int status = ::pclose(pipe);
  EXPECT_EQ(status, 0) << terminal;
  // Three latency rounds, the sweep, three rounds beyond the cache, all_reduce.
  EXPECT_NE(terminal.find("\r\033[K[###########...................] 3/8 tcp: p2p bandwidth"), std::string::npos)
      << terminal;
  EXPECT_NE(terminal.find("write latency"), std::string::npos) << terminal;
  std::filesystem::remove_all(dir_template);
}

TEST(BenchCommand, ArgumentErrors) {
  const CliResult few = run_cli({"bench", "--np", "1"});
  EXPECT_EQ(few.exit_code, 2) << few.err;
  EXPECT_NE(few.err.find("Usage: rdmx bench"), std::string::npos) << few.err;
  const CliResult unknown = run_cli({"bench", "--providers", "carrier-pigeon", "--out", "/tmp/rdmx-bench-unused"});
  EXPECT_EQ(unknown.exit_code, 1) << unknown.err;
  EXPECT_NE(unknown.err.find("provider \"carrier-pigeon\" cannot run local ranks here"), std::string::npos)
      << unknown.err;
}

}  // namespace
}  // namespace rdmx::test
