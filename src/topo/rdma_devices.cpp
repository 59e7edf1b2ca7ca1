// SPDX-License-Identifier: MIT
// RDMA devices from sysfs rather than libibverbs: the report must work on
// hosts where rdma-core is not installed, and say why nothing is there.
#include <algorithm>
#include <cstdlib>

#include "topo/sysfs.hpp"
#include "topo/topo.hpp"

namespace rdmx::topo {
namespace {

// sysfs prints a port state as "4: ACTIVE"; the number adds nothing.
std::string strip_state_number(const std::string& text) {
  const auto colon = text.find(": ");
  return colon == std::string::npos ? text : text.substr(colon + 2);
}

bool all_zero_gid(const std::string& gid) {
  return std::all_of(gid.begin(), gid.end(), [](char c) { return c == '0' || c == ':'; });
}

RdmaPort read_port(const std::string& dir, int number) {
  RdmaPort port{.number = number};
  port.state = strip_state_number(read_text(dir + "/state").value_or(""));
  port.link_layer = read_text(dir + "/link_layer").value_or("");
  port.rate = read_text(dir + "/rate").value_or("");
  port.lid = static_cast<int>(read_integer(dir + "/lid").value_or(0));
  for (const std::string& entry : list_dir(dir + "/gids").names) {
    auto gid = read_text(dir + "/gids/" + entry);
    // Unused table entries read as zeros; listing them would bury the real ones.
    if (!gid || gid->empty() || all_zero_gid(*gid)) continue;
    RdmaGid g{.index = std::atoi(entry.c_str()), .gid = *gid};
    // Types and netdevs fail to read (EINVAL) on InfiniBand ports and unused entries.
    g.type = read_text(dir + "/gid_attrs/types/" + entry).value_or("");
    g.netdev = read_text(dir + "/gid_attrs/ndevs/" + entry).value_or("");
    port.gids.push_back(std::move(g));
  }
  return port;
}

}  // namespace

RdmaScan scan_rdma_devices(const std::string& root) {
  RdmaScan scan;
  const DirListing devices = list_dir(root);
  if (!devices.exists) {
    scan.note = "no RDMA device: " + root + " does not exist (no RDMA driver is loaded)";
    return scan;
  }
  if (!devices.error.empty()) {
    scan.note = "no RDMA device found: cannot list " + root + ": " + devices.error;
    return scan;
  }
  if (devices.names.empty()) {
    scan.note = "no RDMA device: " + root + " is empty";
    return scan;
  }
  for (const std::string& name : devices.names) {
    const std::string dir = root + "/" + name;
    RdmaDevice device{.name = name, .node_guid = read_text(dir + "/node_guid").value_or("")};
    for (const std::string& port : list_dir(dir + "/ports").names) {
      device.ports.push_back(read_port(dir + "/ports/" + port, std::atoi(port.c_str())));
    }
    scan.devices.push_back(std::move(device));
  }
  return scan;
}

}  // namespace rdmx::topo
