// SPDX-License-Identifier: MIT
// rdmx info: the real binary's report and JSON, and the sysfs reading behind
// its RDMA section (on a tree built here, since test hosts rarely have RDMA).
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>

#include "json_schema.hpp"
#include "run_cli.hpp"
#include "topo/topo.hpp"

namespace rdmx::test {
namespace {

using nlohmann::json;

bool has_line(const std::string& text, const std::string& pattern) {
  return std::regex_search(text, std::regex(pattern, std::regex::multiline));
}

json info_json(const std::map<std::string, std::string>& env = {}) {
  const CliResult r = run_cli({"info", "--json"}, env);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  try {
    return json::parse(r.out);
  } catch (const json::parse_error& e) {
    ADD_FAILURE() << "rdmx info --json printed no JSON document: " << e.what() << "\n" << r.out;
    return json::object();
  }
}

const json* find_named(const json& list, const std::string& name) {
  for (const auto& item : list) {
    if (item.value("name", "") == name) return &item;
  }
  return nullptr;
}

TEST(InfoCommand, PrintsEverySectionAndWhyEachProviderIsUsableOrNot) {
  const CliResult r = run_cli({"info"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* heading : {"Providers", "RDMA devices", "Network interfaces", "CPUs and NUMA", "GPUs", "Settings"}) {
    EXPECT_TRUE(has_line(r.out, std::string("^") + heading)) << "no section " << heading << " in:\n" << r.out;
  }
  EXPECT_TRUE(has_line(r.out, R"(^  shm +usable +shm)")) << r.out;
  EXPECT_TRUE(has_line(r.out, R"(^  tcp +usable +tcp)")) << r.out;
  // verbs is built (scripts/deps.sh installs libibverbs-dev); usable only where an RDMA device exists.
  EXPECT_TRUE(has_line(r.out, R"(^  verbs +(not usable +no RDMA device: \S.*|usable +verbs:\S+)$)")) << r.out;
  EXPECT_TRUE(has_line(r.out, R"(^  +caps: .*; CUDA memory: (none|staging|peer-mapping|dma-buf)$)")) << r.out;
  EXPECT_TRUE(has_line(r.out, R"(^  CUDA memory +(on: CUDA driver \d+\.\d+ with \d+ GPUs?|off: \S.*)$)")) << r.out;
  EXPECT_TRUE(has_line(r.out, R"(^  reduction kernels +(built for sm_\d+.*|not built: \S.*)$)")) << r.out;
  EXPECT_TRUE(has_line(r.out, R"(^  auto +opens +auto\[)")) << r.out;
  EXPECT_TRUE(has_line(r.out, R"(^  RDMX_TIMEOUT += \S+ +\((set|default)\) +\S)")) << r.out;
}

// Whether collectives keep pinning registrations between operations depends
// on seeing unmaps; where the host refuses userfaultfd (as Docker's default
// seccomp profile does), info says so and what to do.
TEST(InfoCommand, SaysWhetherRegistrationsAreKeptAndWhyNot) {
  const CliResult r = run_cli({"info"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has_line(r.out, R"(^Registration cache)")) << r.out;
  const json doc = info_json();
  if (doc["registration_cache"]["unmap_detection"].get<bool>()) {
    EXPECT_TRUE(has_line(r.out, R"(^  kept between operations; unmaps seen through userfaultfd events)")) << r.out;
  }
  const CliResult refused = run_cli({"info", "--json"}, {}, std::chrono::seconds(120), SYS_userfaultfd);
  ASSERT_EQ(refused.exit_code, 0) << refused.err;
  const json cache = json::parse(refused.out)["registration_cache"];
  EXPECT_FALSE(cache["unmap_detection"].get<bool>()) << cache.dump();
  EXPECT_NE(cache["how"].get<std::string>().find("seccomp"), std::string::npos) << cache.dump();
  const CliResult text = run_cli({"info"}, {}, std::chrono::seconds(120), SYS_userfaultfd);
  EXPECT_TRUE(
      has_line(text.out, R"(^  pinning registrations last one operation; unmap watching off: userfaultfd\(2\) failed)"))
      << text.out;
}

TEST(InfoCommand, JsonFollowsTheSchemaAndNamesEveryProvider) {
  const json doc = info_json();
  const auto violations = validate_json(doc, load_schema("info.schema.json"));
  EXPECT_TRUE(violations.empty()) << ::testing::PrintToString(violations) << "\n" << doc.dump(2);
  std::vector<std::string> names;
  for (const auto& p : doc["providers"]) names.push_back(p["name"].get<std::string>());
  // Built providers in auto selection's order, then those not built.
  EXPECT_EQ(names, (std::vector<std::string>{"shm", "verbs", "tcp"}));
  for (const char* usable : {"shm", "tcp"}) {
    const json* p = find_named(doc["providers"], usable);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE((*p)["usable"].get<bool>()) << p->dump();
    EXPECT_TRUE((*p)["caps"].is_object()) << p->dump();
  }
  const json* verbs = find_named(doc["providers"], "verbs");
  ASSERT_NE(verbs, nullptr);
  EXPECT_EQ((*verbs)["usable"].get<bool>(), !doc["rdma_devices"].empty()) << verbs->dump();
  if (doc["rdma_devices"].empty()) {
    EXPECT_NE((*verbs)["reason"].get<std::string>().find("no RDMA device"), std::string::npos) << verbs->dump();
  }
  // The schema allows it empty; this host always has CPUs and interfaces.
  EXPECT_GT(doc["logical_cpus"].get<int>(), 0) << doc["cpu_note"];
  EXPECT_NE(find_named(doc["interfaces"], "lo"), nullptr) << doc["interfaces"].dump();
  // With nothing found, the note says why; with something found, there is nothing to explain.
  EXPECT_EQ(doc["rdma_devices"].empty(), !doc["rdma_note"].get<std::string>().empty());
  EXPECT_EQ(doc["gpus"].empty(), !doc["gpu_note"].get<std::string>().empty());
}

// CUDA is loaded at run time: without a driver or a GPU, info says exactly
// why device memory is off (the same words as the GPU list's note), and
// whether this build has the GPU reduction kernels, as configured.
TEST(InfoCommand, SaysWhyCudaMemoryIsOnOrOffAndWhetherKernelsAreBuilt) {
  const json doc = info_json();
  const json& cuda = doc["cuda"];
  EXPECT_EQ(cuda["usable"].get<bool>(), !doc["gpus"].empty()) << cuda.dump();
  EXPECT_FALSE(cuda["reason"].get<std::string>().empty()) << cuda.dump();
  if (!cuda["usable"].get<bool>()) {
    EXPECT_EQ(cuda["reason"], doc["gpu_note"]) << cuda.dump();
  }
  EXPECT_EQ(cuda["kernels"].get<bool>(), RDMX_TEST_CUDA_KERNELS != 0) << cuda.dump();
  const std::string note = cuda["kernels_note"].get<std::string>();
  EXPECT_EQ(note.rfind(RDMX_TEST_CUDA_KERNELS != 0 ? "built for sm_" : "not built: ", 0), 0u) << note;
}

// With a driver and a GPU (the simulated driver of tests/cuda_sim stands in
// here), the GPU section lists it with what it supports for sharing its
// memory, CUDA memory is on, and the document still follows the schema.
TEST(InfoCommand, ShowsAGpuAndWhatItSupports) {
  const std::map<std::string, std::string> env{{"LD_LIBRARY_PATH", RDMX_SIMULATED_CUDA_DIR}};
  const CliResult r = run_cli({"info"}, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has_line(r.out, R"(^  0  rdmx simulated GPU \(tests/cuda_sim\)  0000:00:00\.0  16 GiB$)")) << r.out;
  EXPECT_TRUE(has_line(r.out, R"(^     VMM yes, fd export yes, dma-buf no, GPUDirect RDMA no$)")) << r.out;
  EXPECT_TRUE(has_line(r.out, R"(^  CUDA memory +on: CUDA driver 13\.0 with 1 GPU$)")) << r.out;
  const CliResult js = run_cli({"info", "--json"}, env);
  ASSERT_EQ(js.exit_code, 0) << js.err;
  const json doc = json::parse(js.out);
  const auto violations = validate_json(doc, load_schema("info.schema.json"));
  EXPECT_TRUE(violations.empty()) << ::testing::PrintToString(violations) << "\n" << doc.dump(2);
  ASSERT_EQ(doc["gpus"].size(), 1u) << doc.dump(2);
  EXPECT_TRUE(doc["gpus"][0]["virtual_memory"].get<bool>());
  EXPECT_FALSE(doc["gpus"][0]["dma_buf"].get<bool>());
  EXPECT_EQ(doc["gpu_note"], "");
  EXPECT_TRUE(doc["cuda"]["usable"].get<bool>());
  EXPECT_EQ(doc["cuda"]["driver_version"], 13000);
}

TEST(InfoCommand, AnUnknownOptionIsAUsageError) {
  const CliResult r = run_cli({"info", "--bogus"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--bogus"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(InfoCommand, SettingsShowWhatTheEnvironmentSetsAndFlagUnknownNames) {
  const json doc = info_json({{"RDMX_TIMEOUT", "7"}, {"RDMX_FOO", "1"}, {"RDMX_SPIN_US", ""}});
  const json* timeout = find_named(doc["settings"], "RDMX_TIMEOUT");
  ASSERT_NE(timeout, nullptr);
  EXPECT_TRUE((*timeout)["from_env"].get<bool>());
  EXPECT_EQ((*timeout)["value"], "7s");
  const json* spin = find_named(doc["settings"], "RDMX_SPIN_US");
  ASSERT_NE(spin, nullptr);
  EXPECT_FALSE((*spin)["from_env"].get<bool>());
  EXPECT_EQ((*spin)["value"], "200");
  const json* foo = find_named(doc["settings"], "RDMX_FOO");
  ASSERT_NE(foo, nullptr);
  EXPECT_TRUE((*foo)["from_env"].get<bool>());
  EXPECT_NE((*foo)["meaning"].get<std::string>().find("not a known setting"), std::string::npos) << foo->dump();
  // Every setting the library reads is listed; names from its sources.
  for (const char* name : {"RDMX_DEBUG", "RDMX_DEBUG_FILE", "RDMX_PROVIDER", "RDMX_RNR_TIMEOUT", "RDMX_ALGO",
                           "RDMX_SOCKET_IFNAME", "RDMX_SOCKET_FAMILY", "RDMX_IB_HCA", "RDMX_IB_GID_INDEX", "RDMX_STORE",
                           "RDMX_RANK", "RDMX_WORLD_SIZE", "RDMX_SHM_DIR", "RDMX_COLL_BUFFSIZE"}) {
    EXPECT_NE(find_named(doc["settings"], name), nullptr) << name;
  }

  const CliResult text = run_cli({"info"}, {{"RDMX_TIMEOUT", "7"}, {"RDMX_FOO", "1"}});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(has_line(text.out, R"(^  RDMX_TIMEOUT += 7s +\(set\))")) << text.out;
  EXPECT_TRUE(has_line(text.out, R"(^  RDMX_FOO += 1 +\(set\) +not a known setting)")) << text.out;
}

// A setting added to the library without a line in settings() fails here.
TEST(InfoCommand, SettingsListEveryVariableTheLibraryReads) {
  std::set<std::string> listed;
  const json doc = info_json();
  for (const auto& s : doc["settings"]) listed.insert(s["name"].get<std::string>());
  const std::regex quoted(R"re("(RDMX_[A-Z0-9_]+)")re");
  std::set<std::string> missing;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(source_path("src"))) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (std::sregex_iterator it(text.begin(), text.end(), quoted), end; it != end; ++it) {
      if (!listed.contains((*it)[1].str())) missing.insert((*it)[1].str() + " (" + entry.path().string() + ")");
    }
  }
  EXPECT_TRUE(missing.empty()) << ::testing::PrintToString(missing);
}

// The README's table of settings is the registry's, as `rdmx info
// --settings-markdown` prints it: a setting added, or a default or line of
// documentation changed, without the README fails here.
TEST(InfoCommand, ReadmeSettingsTableIsTheRegistry) {
  const CliResult r = run_cli({"info", "--settings-markdown"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  if (r.out.find("RDMX_IB_HCA") == std::string::npos) {
    GTEST_SKIP() << "this build has no verbs provider, so its settings are not registered; the README lists them";
  }
  std::ifstream in(source_path("README.md"));
  const std::string readme((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string begin = "<!-- settings:begin";
  const std::string end = "<!-- settings:end -->";
  const auto from = readme.find(begin);
  const auto to = readme.find(end);
  ASSERT_NE(from, std::string::npos) << "README.md has no " << begin << " marker";
  ASSERT_NE(to, std::string::npos) << "README.md has no " << end << " marker";
  const auto table = readme.find('\n', from) + 1;
  EXPECT_EQ(readme.substr(table, to - table), r.out)
      << "README.md's settings table differs from the library's settings: regenerate it with "
         "`build/tools/rdmx info --settings-markdown` (between the settings markers)";
  // Every row has a default: the registry writes it once, the README repeats it from there.
  const json settings = info_json()["settings"];  // a copy: a range over a temporary's member would dangle
  ASSERT_FALSE(settings.empty());
  for (const auto& s : settings) {
    if (s["meaning"].get<std::string>().rfind("not a known setting", 0) == 0) continue;
    EXPECT_NE(s["default"], "") << s.dump();
  }
}

// The library refuses a duration it cannot honour; info still reports, and says why.
TEST(InfoCommand, AMalformedDurationIsShownRefused) {
  const json doc = info_json({{"RDMX_TIMEOUT", "soon"}});
  const json* timeout = find_named(doc["settings"], "RDMX_TIMEOUT");
  ASSERT_NE(timeout, nullptr);
  EXPECT_EQ((*timeout)["value"], "soon (refused)");
  const std::string meaning = (*timeout)["meaning"];
  EXPECT_NE(meaning.find("RDMX_TIMEOUT=\"soon\" is not a duration"), std::string::npos) << meaning;
  EXPECT_NE(meaning.find("30 days"), std::string::npos) << meaning;
  // Opening a device would fail the same way, so the providers say so too.
  const json* shm = find_named(doc["providers"], "shm");
  ASSERT_NE(shm, nullptr);
  EXPECT_NE((*shm)["reason"].get<std::string>().find("RDMX_TIMEOUT"), std::string::npos) << shm->dump();
}

// A malformed size is refused like a malformed duration (it used to be
// replaced by the default with a warning), and info says why.
TEST(InfoCommand, AMalformedSizeIsShownRefused) {
  const json doc = info_json({{"RDMX_SHM_EAGER_LIMIT", "lots"}});
  const json* limit = find_named(doc["settings"], "RDMX_SHM_EAGER_LIMIT");
  ASSERT_NE(limit, nullptr);
  EXPECT_EQ((*limit)["value"], "lots (refused)") << limit->dump();
  const std::string meaning = (*limit)["meaning"];
  EXPECT_NE(meaning.find("RDMX_SHM_EAGER_LIMIT=\"lots\" is not a size"), std::string::npos) << meaning;
  EXPECT_NE(meaning.find("from 0 to 64K"), std::string::npos) << meaning;
  // The shm device reads it when it opens, so the provider says so too.
  const json* shm = find_named(doc["providers"], "shm");
  ASSERT_NE(shm, nullptr);
  EXPECT_NE((*shm)["reason"].get<std::string>().find("RDMX_SHM_EAGER_LIMIT"), std::string::npos) << shm->dump();
}

// A sysfs tree shaped like a RoCE device's, with the quirks the reader must
// handle: state numbers, hex LIDs, zero GIDs, ports past 9.
class InfoTopology : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() / ("rdmx-info-test-" + std::to_string(::getpid()));
    std::filesystem::remove_all(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void write(const std::string& relative, const std::string& text) {
    const auto path = root_ / relative;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << text << "\n";
  }
  std::filesystem::path root_;
};

TEST_F(InfoTopology, SaysWhyThereIsNoRdmaDevice) {
  auto missing = topo::scan_rdma_devices((root_ / "infiniband").string());
  EXPECT_TRUE(missing.devices.empty());
  EXPECT_EQ(missing.note,
            "no RDMA device: " + (root_ / "infiniband").string() + " does not exist (no RDMA driver is loaded)");
  std::filesystem::create_directories(root_ / "infiniband");
  auto empty = topo::scan_rdma_devices((root_ / "infiniband").string());
  EXPECT_EQ(empty.note, "no RDMA device: " + (root_ / "infiniband").string() + " is empty");
}

TEST_F(InfoTopology, ReadsPortsAndNonZeroGidsFromSysfs) {
  write("ib/rxe0/node_guid", "0c42:a1ff:fe65:4b2c");
  write("ib/rxe0/ports/1/state", "4: ACTIVE");
  write("ib/rxe0/ports/1/link_layer", "Ethernet");
  write("ib/rxe0/ports/1/rate", "100 Gb/sec (4X EDR)");
  write("ib/rxe0/ports/1/lid", "0x1c");
  write("ib/rxe0/ports/1/gids/0", "fe80:0000:0000:0000:0e42:a1ff:fe65:4b2c");
  write("ib/rxe0/ports/1/gid_attrs/types/0", "IB/RoCE v1");
  write("ib/rxe0/ports/1/gid_attrs/ndevs/0", "eth0");
  write("ib/rxe0/ports/1/gids/1", "0000:0000:0000:0000:0000:0000:0000:0000");
  write("ib/rxe0/ports/1/gids/10", "0000:0000:0000:0000:0000:ffff:0a00:0001");
  write("ib/rxe0/ports/1/gid_attrs/types/10", "RoCE v2");
  write("ib/rxe0/ports/1/gid_attrs/ndevs/10", "eth0");
  write("ib/rxe0/ports/1/gids/2", "0000:0000:0000:0000:0000:ffff:0a00:0002");  // type and netdev unreadable
  write("ib/rxe0/ports/10/state", "1: DOWN");
  write("ib/rxe0/ports/2/state", "1: DOWN");

  const auto scan = topo::scan_rdma_devices((root_ / "ib").string());
  EXPECT_TRUE(scan.note.empty()) << scan.note;
  ASSERT_EQ(scan.devices.size(), 1u);
  const RdmaDevice& device = scan.devices[0];
  EXPECT_EQ(device.name, "rxe0");
  EXPECT_EQ(device.node_guid, "0c42:a1ff:fe65:4b2c");
  ASSERT_EQ(device.ports.size(), 3u);
  EXPECT_EQ(device.ports[0].number, 1);
  EXPECT_EQ(device.ports[1].number, 2);
  EXPECT_EQ(device.ports[2].number, 10);
  EXPECT_EQ(device.ports[2].state, "DOWN");
  const RdmaPort& port = device.ports[0];
  EXPECT_EQ(port.state, "ACTIVE");
  EXPECT_EQ(port.link_layer, "Ethernet");
  EXPECT_EQ(port.rate, "100 Gb/sec (4X EDR)");
  EXPECT_EQ(port.lid, 0x1c);
  ASSERT_EQ(port.gids.size(), 3u);  // the zero GID at index 1 is left out
  EXPECT_EQ(port.gids[0].index, 0);
  EXPECT_EQ(port.gids[0].type, "IB/RoCE v1");
  EXPECT_EQ(port.gids[0].netdev, "eth0");
  EXPECT_EQ(port.gids[1].index, 2);
  EXPECT_EQ(port.gids[1].type, "");
  EXPECT_EQ(port.gids[2].index, 10);
  EXPECT_EQ(port.gids[2].gid, "0000:0000:0000:0000:0000:ffff:0a00:0001");
  EXPECT_EQ(port.gids[2].type, "RoCE v2");
}

}  // namespace
}  // namespace rdmx::test
