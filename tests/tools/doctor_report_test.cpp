// SPDX-License-Identifier: MIT
// rdmx doctor's conclusions (tools/rdmx/report/doctor_report.cpp), in
// process on documents given directly; the bed test (tests/bed) probes.
#include <gtest/gtest.h>

#include <string>

#include "json_schema.hpp"
#include "report/doctor_report.hpp"

namespace rdmx::test::doctor_report {
namespace {

using nlohmann::json;
namespace doctor = cli::doctor;

json interface(const std::string& name, const std::string& address, int mtu = 1500, int numa = -1) {
  return {{"name", name},        {"address", address}, {"prefix", 24},  {"mtu", mtu},
          {"speed_mbps", 10000}, {"numa_node", numa},  {"port", 40001}, {"listen_error", ""}};
}

// Host h: rank h, listening on `chosen` (an address of one of `interfaces`).
json host(int h, json interfaces, const std::string& chosen_name, const std::string& chosen_address,
          const json& ifname = nullptr) {
  return {{"host", "h" + std::to_string(h)},
          {"rank", h},
          {"ranks", {h}},
          {"socket_ifname", ifname},
          {"listen_ports", "any"},
          {"socket_interface",
           {{"usable", true},
            {"name", chosen_name},
            {"address", chosen_address},
            {"why", "test"},
            {"skipped", json::array()}}},
          {"interfaces", std::move(interfaces)},
          {"rdma", json::array()},
          {"gid_index", "auto"},
          {"gpus", json::array()},
          {"gpu_note", "no CUDA driver"}};
}

json probe(int from, const std::string& from_if, const std::string& from_address, int to, const std::string& to_if,
           const std::string& to_address, const std::string& result, double rtt = 0.1, double offset = 0) {
  return {{"from_host", from},
          {"from_interface", from_if},
          {"from_address", from_address},
          {"to_host", to},
          {"to_interface", to_if},
          {"to_address", to_address},
          {"port", 40001},
          {"result", result},
          {"detail", result == "ok" ? "" : "why"},
          {"rtt_ms", result == "ok" ? rtt : 0},
          {"offset_ms", result == "ok" ? offset : 0}};
}

// Two hosts on eth0 (10.0.0.x); host 1 also has mgmt0 (10.9.0.2), which
// reaches nothing: the bed's stray interface.
doctor::Input stray_on_host1(const std::string& host1_listens_on) {
  doctor::Input in;
  in.hosts.push_back(host(0, {interface("eth0", "10.0.0.1")}, "eth0", "10.0.0.1"));
  const bool on_stray = host1_listens_on == "mgmt0";
  in.hosts.push_back(host(1, {interface("mgmt0", "10.9.0.2"), interface("eth0", "10.0.0.2")}, host1_listens_on,
                          on_stray ? "10.9.0.2" : "10.0.0.2", on_stray ? json("=mgmt0") : json(nullptr)));
  in.probes = {probe(0, "eth0", "10.0.0.1", 1, "mgmt0", "10.9.0.2", "unreachable"),
               probe(0, "eth0", "10.0.0.1", 1, "eth0", "10.0.0.2", "ok"),
               probe(1, "mgmt0", "10.9.0.2", 0, "eth0", "10.0.0.1", "timeout"),
               probe(1, "eth0", "10.0.0.2", 0, "eth0", "10.0.0.1", "ok")};
  return in;
}

json with_run_fields(json doc) {
  doc["schema"] = "rdmx.doctor/1";
  doc["ranks"] = 2;
  doc["store"] = "10.0.0.1:29500";
  return doc;
}

int count(const json& doc, const std::string& severity, const std::string& topic) {
  int n = 0;
  for (const json& f : doc["findings"]) n += f["severity"] == severity && f["topic"] == topic;
  return n;
}

const json& first(const json& doc, const std::string& topic) {
  for (const json& f : doc["findings"]) {
    if (f["topic"] == topic) return f;
  }
  ADD_FAILURE() << "no " << topic << " finding in " << doc["findings"].dump(1);
  static const json none = {{"message", ""}, {"fix", ""}, {"severity", ""}};
  return none;
}

TEST(DoctorReport, AnInterfaceThatReachesNoPeerIsANoteWhenRanksSkipIt) {
  const json doc = doctor::analyse(stray_on_host1("eth0"));
  expect_valid(with_run_fields(doc), "doctor.schema.json");
  EXPECT_EQ(doc["problems"], 0);
  ASSERT_EQ(count(doc, "note", "interface"), 1) << doc["findings"].dump(1);
  const json& f = first(doc, "interface");
  EXPECT_EQ(f["host"], "h1");
  EXPECT_NE(f["message"].get<std::string>().find("mgmt0 (10.9.0.2) reaches no other host"), std::string::npos);
  EXPECT_NE(f["message"].get<std::string>().find("to it: unreachable; from it: timeout"), std::string::npos);
  EXPECT_NE(f["fix"].get<std::string>().find("RDMX_SOCKET_IFNAME==eth0"), std::string::npos);
  EXPECT_NE(doctor::describe(with_run_fields(doc)).find("No problems found."), std::string::npos);
}

TEST(DoctorReport, AnInterfaceThatReachesNoPeerIsAProblemWhenRanksListenOnIt) {
  const json doc = doctor::analyse(stray_on_host1("mgmt0"));
  EXPECT_EQ(doc["problems"], 1);
  const json& f = first(doc, "interface");
  EXPECT_EQ(f["severity"], "problem");
  EXPECT_NE(f["message"].get<std::string>().find("ranks listen on mgmt0"), std::string::npos);
  EXPECT_NE(f["fix"].get<std::string>().find("RDMX_SOCKET_IFNAME==mgmt0 picks it: on this host set it to =eth0"),
            std::string::npos)
      << f["fix"];
  EXPECT_NE(doctor::describe(with_run_fields(doc)).find("1 problem(s) found."), std::string::npos);
}

TEST(DoctorReport, RefusedConnectionsNameTheFirewallAndThePortRange) {
  doctor::Input in = stray_on_host1("eth0");
  in.probes[1]["result"] = "refused";
  json doc = doctor::analyse(in);
  ASSERT_EQ(count(doc, "problem", "ports"), 1) << doc["findings"].dump(1);
  EXPECT_NE(first(doc, "ports")["fix"].get<std::string>().find("set RDMX_PORT_RANGE=FIRST-LAST"), std::string::npos);
  in.hosts[1]["listen_ports"] = "41000-41099";
  doc = doctor::analyse(in);
  EXPECT_NE(first(doc, "ports")["fix"].get<std::string>().find("open RDMX_PORT_RANGE=41000-41099"), std::string::npos);
}

TEST(DoctorReport, AListenerThatCouldNotBindIsAProblem) {
  doctor::Input in = stray_on_host1("eth0");
  in.hosts[0]["interfaces"][0]["port"] = 0;
  in.hosts[0]["interfaces"][0]["listen_error"] = "bind: Address already in use";
  const json doc = doctor::analyse(in);
  EXPECT_EQ(count(doc, "problem", "ports"), 1) << doc["findings"].dump(1);
  EXPECT_NE(first(doc, "ports")["message"].get<std::string>().find("Address already in use"), std::string::npos);
}

TEST(DoctorReport, MtuMismatchBetweenInterfacesThatReachEachOther) {
  doctor::Input in = stray_on_host1("eth0");
  in.hosts[1]["interfaces"][1]["mtu"] = 9000;
  const json doc = doctor::analyse(in);
  ASSERT_EQ(count(doc, "warning", "mtu"), 1) << doc["findings"].dump(1);  // both directions, said once
  EXPECT_NE(first(doc, "mtu")["fix"].get<std::string>().find("mtu 1500"), std::string::npos);
  EXPECT_EQ(doc["problems"], 0);
  in.hosts[1]["interfaces"][0]["mtu"] = 9000;  // the stray one reaches nothing: no mismatch to speak of
  in.hosts[1]["interfaces"][1]["mtu"] = 1500;
  EXPECT_EQ(count(doctor::analyse(in), "warning", "mtu"), 0);
}

json roce_port(const json& gids) {
  return {{"device", "rxe0"}, {"port", 1}, {"state", "ACTIVE"}, {"link_layer", "Ethernet"}, {"gids", gids}};
}

TEST(DoctorReport, RoceGidsPickedAsTheProviderDoesAndHostsThatDisagree) {
  const json v1 = {
      {"index", 0}, {"gid", "fe80:0000:0000:0000:0000:00ff:fe00:0001"}, {"type", "IB/RoCE v1"}, {"netdev", "eth0"}};
  const json v2_6 = {
      {"index", 1}, {"gid", "fe80:0000:0000:0000:0000:00ff:fe00:0001"}, {"type", "RoCE v2"}, {"netdev", "eth0"}};
  const json v2_4 = {
      {"index", 3}, {"gid", "0000:0000:0000:0000:0000:ffff:0a00:0001"}, {"type", "RoCE v2"}, {"netdev", "eth0"}};
  doctor::Input in = stray_on_host1("eth0");
  in.hosts[0]["rdma"] = {roce_port({v1, v2_6, v2_4})};
  in.hosts[1]["rdma"] = {roce_port({v1, v2_6, v2_4})};
  json doc = doctor::analyse(in);
  ASSERT_EQ(doc["roce"].size(), 2u);
  EXPECT_EQ(doc["roce"][0]["gid"]["index"], 3);  // RoCE v2 with an IPv4 address first
  EXPECT_EQ(count(doc, "problem", "roce") + count(doc, "warning", "roce"), 0) << doc["findings"].dump(1);

  in.hosts[1]["gid_index"] = "0";  // forced to RoCE v1 on one host
  doc = doctor::analyse(in);
  EXPECT_EQ(count(doc, "warning", "roce"), 1) << doc["findings"].dump(1);
  EXPECT_EQ(count(doc, "problem", "roce"), 1);  // v1 against v2: the QPs cannot connect

  in.hosts[1]["gid_index"] = "7";  // not in the table
  doc = doctor::analyse(in);
  EXPECT_NE(first(doc, "roce")["message"].get<std::string>().find("RDMX_IB_GID_INDEX=7 is not in its GID table"),
            std::string::npos);
  expect_valid(with_run_fields(doc), "doctor.schema.json");
}

TEST(DoctorReport, ClockSkewBeyondTheBoundAndItsUncertainty) {
  doctor::Input in = stray_on_host1("eth0");
  in.probes[1] = probe(0, "eth0", "10.0.0.1", 1, "eth0", "10.0.0.2", "ok", 2.0, -120.0);
  json doc = doctor::analyse(in);
  ASSERT_EQ(doc["clock"].size(), 1u);
  EXPECT_DOUBLE_EQ(doc["clock"][0]["offset_ms"], -120.0);
  EXPECT_DOUBLE_EQ(doc["clock"][0]["uncertainty_ms"], 1.0);
  ASSERT_EQ(count(doc, "warning", "clock"), 1);
  EXPECT_NE(first(doc, "clock")["message"].get<std::string>().find("120.0 ms behind h0's"), std::string::npos);
  // Within the bound once the round trip's uncertainty is allowed for.
  in.probes[1] = probe(0, "eth0", "10.0.0.1", 1, "eth0", "10.0.0.2", "ok", 40.0, 60.0);
  EXPECT_EQ(count(doctor::analyse(in), "warning", "clock"), 0);
}

TEST(DoctorReport, AGpuWithoutANicOnItsNumaNode) {
  doctor::Input in = stray_on_host1("eth0");
  in.hosts[0]["interfaces"][0]["numa_node"] = 0;
  in.hosts[0]["gpus"] = {{{"index", 0}, {"name", "H200"}, {"numa_node", 0}},
                         {{"index", 1}, {"name", "H200"}, {"numa_node", 1}}};
  const json doc = doctor::analyse(in);
  ASSERT_EQ(count(doc, "warning", "gpu_nic"), 1) << doc["findings"].dump(1);
  EXPECT_NE(first(doc, "gpu_nic")["message"].get<std::string>().find("GPU 1 (H200) is on NUMA node 1"),
            std::string::npos);
  expect_valid(with_run_fields(doc), "doctor.schema.json");
}

TEST(DoctorReport, OneHostHasNoReachabilityToSpeakOf) {
  doctor::Input in;
  in.hosts.push_back(host(0, {interface("eth0", "10.0.0.1")}, "eth0", "10.0.0.1"));
  const json doc = doctor::analyse(in);
  EXPECT_TRUE(doc["findings"].empty()) << doc["findings"].dump(1);
  EXPECT_EQ(doctor::describe(with_run_fields(doc)).find("Reachability"), std::string::npos);
}

}  // namespace
}  // namespace rdmx::test::doctor_report
