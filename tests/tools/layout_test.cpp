// SPDX-License-Identifier: MIT
// The rdmx command's rooms (docs/TOOLS.md, "Layout"): every source under
// tools/rdmx sits in a room, and a room includes only itself, the rooms
// below it and the public API. One include path (tools/rdmx) serves every
// room, so the compiler cannot refuse an upward include; this test does.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "run_cli.hpp"

namespace rdmx::test {
namespace {

namespace fs = std::filesystem;

// Each room and the rooms it may include besides itself.
const std::map<std::string, std::set<std::string>>& rooms() {
  static const std::map<std::string, std::set<std::string>> table = {
      {"cli", {}},
      {"report", {}},
      {"launch", {"cli"}},
      {"perf", {"cli", "launch", "report"}},
      {"info", {"cli", "launch"}},
      {"plan", {"cli", "launch", "report"}},
      {"status", {"cli"}},
      {"doctor", {"cli", "launch", "report"}},
  };
  return table;
}

struct Source {
  std::string room;      // first folder under tools/rdmx; empty at the top
  std::string relative;  // path under tools/rdmx
  fs::path path;
};

std::vector<Source> tool_sources() {
  const fs::path root = source_path("tools/rdmx");
  std::vector<Source> sources;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    const std::string ext = entry.path().extension().string();
    if (!entry.is_regular_file() || (ext != ".cpp" && ext != ".hpp")) continue;
    const fs::path relative = fs::relative(entry.path(), root);
    const std::string first = relative.begin()->string();
    sources.push_back({relative.has_parent_path() ? first : std::string(), relative.string(), entry.path()});
  }
  return sources;
}

TEST(ToolsLayout, EverySourceSitsInARoom) {
  const std::vector<Source> sources = tool_sources();
  ASSERT_FALSE(sources.empty()) << "no sources under " << source_path("tools/rdmx");
  for (const Source& s : sources) {
    EXPECT_TRUE(rooms().count(s.room) == 1)
        << "tools/rdmx/" << s.relative << " is not in a room (cli, report, launch, perf, info, plan, status, doctor); "
        << "hint: put it in the room of what it does, or add the room to docs/TOOLS.md's Layout and to this test";
  }
}

TEST(ToolsLayout, RoomsIncludeOnlyTheRoomsBelow) {
  const std::regex quoted(R"(^\s*#\s*include\s*"([^"]+)\")");
  int includes = 0;
  for (const Source& s : tool_sources()) {
    const auto room = rooms().find(s.room);
    if (room == rooms().end()) continue;  // EverySourceSitsInARoom names it
    std::ifstream in(s.path);
    std::string line;
    for (int number = 1; std::getline(in, line); ++number) {
      std::smatch m;
      if (!std::regex_search(line, m, quoted)) continue;
      ++includes;
      const std::string target = m[1];
      const auto slash = target.find('/');
      const std::string to = slash == std::string::npos ? std::string() : target.substr(0, slash);
      if (to == "rdmx") continue;  // the public API (include/rdmx)
      const bool allowed = to == s.room || room->second.count(to) == 1;
      std::string below;
      for (const std::string& r : room->second) below += (below.empty() ? "" : ", ") + r;
      EXPECT_TRUE(allowed) << "tools/rdmx/" << s.relative << ":" << number << " includes \"" << target << "\": room "
                           << s.room << " may include itself, rdmx/* and "
                           << (below.empty() ? std::string("no other room") : below)
                           << " (docs/TOOLS.md, Layout); hint: include a header as \"room/file.hpp\", and move "
                              "what two rooms share into the lower one";
    }
  }
  EXPECT_GT(includes, 0) << "no #include \"...\" read under tools/rdmx";
}

}  // namespace
}  // namespace rdmx::test
