// SPDX-License-Identifier: MIT
// discover_topology(): the host as `rdmx info` reports it.
#include <unistd.h>

#include "topo/topo.hpp"

namespace rdmx {

HostTopology discover_topology() {
  HostTopology host;
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) == 0) host.hostname = name;
  topo::CpuScan cpus = topo::scan_cpus();
  host.cores = cpus.cores;
  host.logical_cpus = cpus.logical_cpus;
  host.numa_nodes = std::move(cpus.numa_nodes);
  host.cpu_note = std::move(cpus.note);
  host.interfaces = topo::scan_interfaces();
  topo::RdmaScan rdma = topo::scan_rdma_devices();
  host.rdma_devices = std::move(rdma.devices);
  host.rdma_note = std::move(rdma.note);
  const topo::GpuScan& gpus = topo::scan_gpus();
  host.gpus = gpus.gpus;
  host.gpu_note = gpus.note;
  return host;
}

}  // namespace rdmx
