// SPDX-License-Identifier: MIT
// Cores, hardware threads and NUMA nodes, from hwloc: it already knows the
// quirks (offline CPUs, cpusets of containers, nodes without memory) that
// parsing /sys/devices/system by hand would get wrong.
#include <hwloc.h>

#include <memory>

#include "topo/topo.hpp"

namespace rdmx::topo {

CpuScan scan_cpus() {
  CpuScan scan;
  hwloc_topology_t topology = nullptr;
  if (hwloc_topology_init(&topology) != 0) {
    scan.note = "hwloc_topology_init failed";
    return scan;
  }
  std::unique_ptr<hwloc_topology, void (*)(hwloc_topology_t)> guard(topology, hwloc_topology_destroy);
  if (hwloc_topology_load(topology) != 0) {
    scan.note = "hwloc_topology_load failed (is /sys mounted?)";
    return scan;
  }
  scan.cores = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_CORE);
  scan.logical_cpus = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_PU);
  const int nodes = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < nodes; ++i) {
    const hwloc_obj_t obj = hwloc_get_obj_by_type(topology, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    if (obj == nullptr) continue;
    NumaNode node;
    node.index = static_cast<int>(obj->os_index);
    // cpuset bits are OS numbers, the ones taskset and /proc/cpuinfo use.
    for (int cpu = hwloc_bitmap_first(obj->cpuset); cpu != -1; cpu = hwloc_bitmap_next(obj->cpuset, cpu)) {
      node.cpus.push_back(cpu);
    }
    if (obj->attr != nullptr) node.memory_bytes = obj->attr->numanode.local_memory;
    scan.numa_nodes.push_back(std::move(node));
  }
  return scan;
}

}  // namespace rdmx::topo
