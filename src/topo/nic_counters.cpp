// SPDX-License-Identifier: MIT
// read_nic_counters(): what the kernel and the RDMA driver count of a link,
// for `rdmx perf fabric` to sample around its sweep.
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "topo/sysfs.hpp"
#include "topo/topo.hpp"

namespace rdmx {
namespace {

// The netdev statistics that only move when something goes wrong.
constexpr const char* kNetdevCounters[] = {"rx_dropped",    "tx_dropped",     "rx_errors",         "tx_errors",
                                           "rx_crc_errors", "rx_fifo_errors", "tx_carrier_errors", "collisions"};

void add_dir(std::vector<NicCounter>& out, const std::string& dir, const std::string& label) {
  for (const std::string& name : topo::list_dir(dir).names) {
    if (const auto value = topo::read_integer(dir + "/" + name)) out.push_back({label + "/" + name, *value});
  }
}

// "Tcp: ... RetransSegs ..." then "Tcp: ... 42 ...": the header line names the columns.
void add_tcp_retransmissions(std::vector<NicCounter>& out) {
  std::ifstream snmp("/proc/net/snmp");
  std::string header;
  std::string values;
  while (std::getline(snmp, header)) {
    if (header.rfind("Tcp:", 0) != 0 || !std::getline(snmp, values)) continue;
    std::istringstream names(header);
    std::istringstream numbers(values);
    std::string name;
    std::string number;
    while (names >> name && numbers >> number) {
      char* end = nullptr;
      const long long parsed = std::strtoll(number.c_str(), &end, 10);
      if (name == "RetransSegs" && *end == '\0') out.push_back({"tcp/RetransSegs", parsed});
    }
    return;
  }
}

}  // namespace

std::vector<NicCounter> read_nic_counters(const std::string& interface) {
  std::vector<NicCounter> out;
  const std::string stats = "/sys/class/net/" + interface + "/statistics/";
  for (const char* name : kNetdevCounters) {
    if (const auto value = topo::read_integer(stats + name)) out.push_back({name, *value});
  }
  const std::string rdma_root = "/sys/class/infiniband";
  for (const RdmaDevice& device : topo::scan_rdma_devices(rdma_root).devices) {
    for (const RdmaPort& port : device.ports) {
      bool on_interface = device.name == interface;
      for (const RdmaGid& gid : port.gids) on_interface = on_interface || gid.netdev == interface;
      if (!on_interface) continue;
      const std::string base = rdma_root + "/" + device.name + "/ports/" + std::to_string(port.number);
      const std::string label = device.name + "/" + std::to_string(port.number);
      add_dir(out, base + "/counters", label + "/counters");
      add_dir(out, base + "/hw_counters", label + "/hw_counters");
    }
  }
  add_tcp_retransmissions(out);
  return out;
}

}  // namespace rdmx
