// SPDX-License-Identifier: MIT
// rdmx perf on CUDA device memory (--memory cuda) and the GPU's own copy rate
// (perf gpu-copy). The GPU cases skip, saying why, on a host without one;
// tests/CMakeLists.txt runs them again on the simulated driver
// (SimulatedGpu.PerfDeviceMemory.*), whose copies complete on the driver's
// own threads, so a tool that read device memory with the CPU, or before a
// copy landed, fails there.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "json_schema.hpp"
#include "run_cli.hpp"
#include "support/cuda_device.hpp"

namespace rdmx::test {
namespace {

using nlohmann::json;

bool has_line(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (std::regex_search(line, re)) return true;
  }
  return false;
}

std::size_t count_lines(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  std::istringstream lines(text);
  std::size_t n = 0;
  for (std::string line; std::getline(lines, line);) n += std::regex_search(line, re) ? 1 : 0;
  return n;
}

// write_bw checks at rank 1 every byte rank 0 wrote, read back through the
// driver; write_lat ping-pongs device buffers. Both providers that serve
// device memory: shm by peer mapping, tcp by staging.
TEST(PerfDeviceMemory, P2pWriteTestsMoveDeviceBuffersOverShmAndTcp) {
  RDMX_REQUIRE_GPU_BEFORE_FORK();
  for (const std::string provider : {"shm", "tcp"}) {
    SCOPED_TRACE(provider);
    const CliResult r = run_cli({"perf", "p2p", "write_bw,write_lat", "--provider", provider, "--memory", "cuda", "-s",
                                 "8,64K", "-n", "40", "--warmup", "4"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(count_lines(r.out, R"(^ Memory          : cuda: device memory of GPU 0 \(.+\), cuMemAlloc, registered$)"),
              2u)
        << r.out;
    EXPECT_TRUE(has_line(r.out, R"(^ 65536 +40 )")) << r.out;  // write_lat's row
    EXPECT_TRUE(has_line(r.out, R"(^ 65536 +40 +[0-9.]+ +[0-9.]+)")) << r.out;
    EXPECT_EQ(count_lines(r.out, R"(^ (8|65536) +40 )"), 4u) << r.out;
  }
}

// Every other test of perf p2p on device buffers too (read_bw checks the
// bytes it read; atomic_lat reads back each fetched value), and the JSON
// document says the memory type.
TEST(PerfDeviceMemory, P2pEveryTestRunsOnDeviceBuffersAndTheJsonSaysSo) {
  RDMX_REQUIRE_GPU_BEFORE_FORK();
  const CliResult r = run_cli({"perf", "p2p", "all", "--provider", "shm", "--memory", "cuda", "-s", "8,4K", "-n", "20",
                               "--warmup", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json doc = json::parse(r.out);
  expect_valid(doc, "perf_p2p.schema.json");
  EXPECT_EQ(doc["memory"], "cuda") << doc.dump(2);
  EXPECT_EQ(doc["gpu"], 0) << doc.dump(2);
  EXPECT_EQ(doc["runs"].size(), 7u) << doc.dump(2);
}

// The check (-c 1) copies the inputs in and the results back through the
// driver; two ranks share the one GPU, which NCCL would refuse, and the
// output says so once.
TEST(PerfDeviceMemory, CollAllReduceChecksResultsInDeviceMemory) {
  RDMX_REQUIRE_GPU_BEFORE_FORK();
  for (const std::string provider : {"shm", "tcp"}) {
    SCOPED_TRACE(provider);
    const std::string lines_path = ::testing::TempDir() + "perf_device_memory_" + provider + ".jsonl";
    std::remove(lines_path.c_str());
    const CliResult r = run_cli({"perf",     "coll", "all_reduce", "--provider", provider, "--np",         "2",
                                 "--memory", "cuda", "-b",         "4",          "-e",     "64K",          "-n",
                                 "3",        "-w",   "1",          "-c",         "1",      "--json-lines", lines_path});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_TRUE(has_line(r.out, R"(^# Out of bounds values : 0 OK$)")) << r.out;
    EXPECT_TRUE(has_line(r.out, R"(^# memory: cuda, device memory \(cuMemAlloc\), ranks on GPUs 0,0$)")) << r.out;
    EXPECT_EQ(count_lines(r.out, R"(^# note: 2 ranks share GPU 0; NCCL refuses that)"), 1u) << r.out;
    EXPECT_EQ(count_lines(r.out, R"(^ +(4|65536) +[0-9]+ +float +sum )"), 2u) << r.out;
    std::ifstream lines(lines_path);
    std::size_t rows = 0;
    for (std::string line; std::getline(lines, line); ++rows) EXPECT_EQ(json::parse(line)["memory"], "cuda") << line;
    EXPECT_EQ(rows, 2u * 15) << "4 B to 64 KiB, out of place and in place";
  }
}

// The roofline: the GPU's device-to-device copy rate over the same sizes.
TEST(PerfDeviceMemory, GpuCopyMeasuresTheDeviceToDeviceCopyRate) {
  RDMX_REQUIRE_GPU_BEFORE_FORK();
  const CliResult r = run_cli({"perf", "gpu-copy", "-b", "4", "-e", "1M", "-n", "5"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(has_line(r.out, R"(^# rdmx perf gpu-copy: GPU 0 \(.+\), cuMemcpyAsync device to device)")) << r.out;
  EXPECT_TRUE(has_line(r.out, R"(bytes counted once)")) << r.out;
  EXPECT_EQ(count_lines(r.out, R"(^ +[0-9]+ +5 +[0-9.]+ +[0-9.]+ +OK$)"), 19u) << r.out;  // 4 B .. 1 MiB
  const CliResult js = run_cli({"perf", "gpu-copy", "--sizes", "4K,1M", "-n", "3", "--json"});
  ASSERT_EQ(js.exit_code, 0) << js.out << js.err;
  const json doc = json::parse(js.out);
  ASSERT_EQ(doc["results"].size(), 2u) << doc.dump(2);
  EXPECT_EQ(doc["results"][1]["bytes"], 1 << 20) << doc.dump(2);
  EXPECT_GT(doc["results"][1]["bw_GBps"].get<double>(), 0) << doc.dump(2);
}

// Without a GPU every rank says why device memory is off, in the driver's
// words, and ends with the status of an unsupported combination (3).
TEST(PerfDeviceMemory, WithoutAGpuDeviceMemoryIsRefusedSayingWhy) {
  std::string why;
  if (gpu_usable_in_child(&why)) GTEST_SKIP() << "this host has a GPU";
  const CliResult r = run_cli({"perf", "p2p", "write_bw", "--provider", "shm", "--memory", "cuda"});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("--memory cuda: no usable GPU: " + why), std::string::npos) << r.err;
  const CliResult copy = run_cli({"perf", "gpu-copy"});
  EXPECT_EQ(copy.exit_code, 3) << copy.out << copy.err;
  EXPECT_NE(copy.err.find("no usable GPU: " + why), std::string::npos) << copy.err;
}

// A provider whose caps().cuda_memory is none (verbs without dma-buf) is
// refused by name before any buffer is registered.
TEST(PerfDeviceMemory, AProviderWithoutDeviceMemoryIsRefusedByName) {
  RDMX_REQUIRE_GPU_BEFORE_FORK();
  const CliResult info = run_cli({"info", "--json"});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  std::string provider;
  for (const json& p : json::parse(info.out)["providers"]) {
    if (p["usable"].get<bool>() && p["caps"]["cuda_memory"] == "none") provider = p["name"].get<std::string>();
  }
  if (provider.empty()) GTEST_SKIP() << "every usable provider here serves device memory (verbs needs an RDMA device)";
  const CliResult r = run_cli({"perf", "p2p", "write_bw", "--provider", provider, "--memory", "cuda"});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("provider " + provider + " serves no CUDA device memory"), std::string::npos) << r.err;
}

TEST(PerfDeviceMemory, MemoryOptionErrorsAreUsageErrors) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"perf", "p2p", "write_bw", "--memory", "gpu"}, "--memory: gpu not in {host,cuda}"},
      {{"perf", "p2p", "write_bw", "--memory", "cuda", "--heap"}, "it does not go with --memory cuda"},
      {{"perf", "coll", "all_reduce", "--memory", "device"}, "--memory: device not in {host,cuda}"},
      {{"perf", "p2p", "write_bw", "--gpu", "-1"}, "--gpu: Value -1 not in range"},
      {{"perf", "gpu-copy", "-b", "1M", "-e", "4"}, "an empty range"}};
  for (const auto& [args, message] : cases) {
    const CliResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << ::testing::PrintToString(args) << r.out << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << ::testing::PrintToString(args) << r.err;
  }
}

}  // namespace
}  // namespace rdmx::test
