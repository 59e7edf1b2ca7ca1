// SPDX-License-Identifier: MIT
// One version everywhere: project(rdmx VERSION ...) in CMakeLists.txt, the
// header's macros, rdmx::version() in the library and `rdmx --version`.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <string>

#include "rdmx/version.hpp"
#include "run_cli.hpp"

namespace rdmx::test {
namespace {

std::string dotted(int major, int minor, int patch) {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

TEST(Version, MacrosLibraryAndCMakeAgree) {
  const std::string from_macros = dotted(RDMX_VERSION_MAJOR, RDMX_VERSION_MINOR, RDMX_VERSION_PATCH);
  EXPECT_EQ(std::string(RDMX_VERSION_STRING), from_macros);
  EXPECT_EQ(std::string(rdmx::version()), from_macros);
  // One comparable number, as NCCL_VERSION_CODE.
  EXPECT_EQ(RDMX_VERSION, RDMX_VERSION_MAJOR * 10000 + RDMX_VERSION_MINOR * 100 + RDMX_VERSION_PATCH);
  static_assert(RDMX_VERSION_CODE(0, 1, 0) < RDMX_VERSION_CODE(0, 1, 1));
  static_assert(RDMX_VERSION_CODE(0, 9, 9) < RDMX_VERSION_CODE(1, 0, 0));

  std::ifstream in(source_path("CMakeLists.txt"));
  const std::string cmake((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::smatch m;
  ASSERT_TRUE(std::regex_search(cmake, m, std::regex(R"(project\(rdmx VERSION ([0-9]+\.[0-9]+\.[0-9]+))")));
  EXPECT_EQ(m[1].str(), from_macros);
}

TEST(Version, CommandPrintsTheLibraryVersion) {
  const CliResult r = run_cli({"--version"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, std::string("rdmx ") + rdmx::version() + "\n");
  EXPECT_EQ(r.out, "rdmx " + dotted(RDMX_VERSION_MAJOR, RDMX_VERSION_MINOR, RDMX_VERSION_PATCH) + "\n");
  EXPECT_TRUE(r.err.empty()) << r.err;
}

}  // namespace
}  // namespace rdmx::test
