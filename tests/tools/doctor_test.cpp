// SPDX-License-Identifier: MIT
// The rdmx doctor command on this host, alone and before `rdmx run`'s
// ranks; the multi-host bed test (tests/bed/doctor_bed_test.sh) has it
// probe other hosts through a stray interface and a firewall.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "json_schema.hpp"
#include "rdmx/bootstrap.hpp"
#include "run_cli.hpp"

namespace rdmx::test {
namespace {

TEST(DoctorCommand, AloneItReportsThisHostAsASchemaDocument) {
  const CliResult r = run_cli({"doctor", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json doc = nlohmann::json::parse(r.out);
  expect_valid(doc, "doctor.schema.json");
  EXPECT_EQ(doc["ranks"], 1);
  ASSERT_EQ(doc["hosts"].size(), 1u);
  EXPECT_TRUE(doc["probes"].empty());  // no other host to reach
  for (const auto& e : doc["hosts"][0]["interfaces"]) {
    EXPECT_GT(e["port"].get<int>(), 0) << e.dump();  // each address listened
    EXPECT_EQ(e["listen_error"], "") << e.dump();
  }
}

TEST(DoctorCommand, RunDoctorChecksBeforeTheRanksStart) {
  const CliResult r = run_cli({"run", "-n", "2", "--doctor", "--", "sh", "-c", "echo started"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "[0] # rdmx doctor: 2 ranks on 1 hosts")) << r.out;
  EXPECT_TRUE(contains(r.out, "host ")) << r.out;
  EXPECT_TRUE(contains(r.out, "(ranks 0 1)")) << r.out;  // one host, spoken for once
  EXPECT_TRUE(contains(r.out, "[0] started")) << r.out;
  EXPECT_TRUE(contains(r.out, "[1] started")) << r.out;
}

TEST(DoctorCommand, APortRangeWithoutAFreePortStopsRunBeforeTheCommand) {
  // Hold one port on every address; the range is that port alone.
  const int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  int zero = 0;
  ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));  // and IPv4's too
  sockaddr_in6 at{};
  at.sin6_family = AF_INET6;
  ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&at), sizeof(at)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t length = sizeof(at);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&at), &length);
  const std::string port = std::to_string(ntohs(at.sin6_port));
  const CliResult r = run_cli({"run", "-n", "1", "--doctor", "--", "sh", "-c", "echo started"},
                              {{"RDMX_PORT_RANGE", port + "-" + port}});
  ::close(fd);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "[problem] ports:")) << r.out;
  EXPECT_TRUE(contains(r.out, "with ports " + port + "-" + port + ": bind: Address already in use")) << r.out;
  EXPECT_TRUE(contains(r.err, "rdmx doctor found a problem (above); sh not started")) << r.err;
  EXPECT_FALSE(contains(r.out, "[0] started")) << r.out;
}

// A standalone store outlives jobs: doctor leaves it as it found it, so a
// second run reads none of the first one's keys.
TEST(DoctorCommand, LeavesNoKeysInTheStore) {
  char dir_template[] = "/tmp/rdmx-doctor-store.XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const std::map<std::string, std::string> job = {
      {"RDMX_STORE", "file:" + dir}, {"RDMX_RANK", "0"}, {"RDMX_WORLD_SIZE", "1"}};
  for (int run = 0; run < 2; ++run) {
    const CliResult r = run_cli({"doctor", "--json"}, job);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["hosts"].size(), 1u) << r.out;
    EXPECT_TRUE(open_file_store(dir)->keys("").empty()) << "after run " << run;
  }
  std::filesystem::remove_all(dir);
}

TEST(DoctorCommand, AMalformedPortRangeIsNamed) {
  const CliResult r = run_cli({"doctor"}, {{"RDMX_PORT_RANGE", "9-1"}});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "RDMX_PORT_RANGE=\"9-1\" is not a port range")) << r.err;
}

}  // namespace
}  // namespace rdmx::test
