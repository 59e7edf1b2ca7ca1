// SPDX-License-Identifier: MIT
// The parts of discover_topology(), one per source of facts. The sysfs roots
// are parameters so tests can point them at a tree they built.
#pragma once

#include <string>
#include <vector>

#include "rdmx/info.hpp"

namespace rdmx::topo {

// Cores, hardware threads and NUMA nodes (hwloc); on failure the counts stay 0
// and `note` says why.
struct CpuScan {
  int cores = 0;
  int logical_cpus = 0;
  std::vector<NumaNode> numa_nodes;
  std::string note;
};
CpuScan scan_cpus();

// Every interface getifaddrs lists, with its addresses and what sysfs says of it.
std::vector<NetInterface> scan_interfaces(const std::string& sysfs_net = "/sys/class/net");

// RDMA devices under `root`; when there are none, `note` says exactly why.
struct RdmaScan {
  std::vector<RdmaDevice> devices;
  std::string note;
};
RdmaScan scan_rdma_devices(const std::string& root = "/sys/class/infiniband");

// GPUs the CUDA driver reports; when there are none, `note` says why. Read once
// per process: cuInit is not free and the answer does not change.
struct GpuScan {
  std::vector<Gpu> gpus;
  std::string note;
};
const GpuScan& scan_gpus();

}  // namespace rdmx::topo
