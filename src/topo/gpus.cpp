// SPDX-License-Identifier: MIT
// GPUs as the CUDA driver reports them (services/cuda/driver.hpp loads it at run
// time): the driver, not the toolkit, is what knows the GPUs, and the toolkit
// may be installed without one, or the reverse.
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <string>

#include "services/cuda/driver.hpp"
#include "topo/sysfs.hpp"
#include "topo/topo.hpp"

namespace rdmx::topo {
namespace {

GpuScan scan() {
  GpuScan scan;
  const core::cuda::DriverLoad& load = core::cuda::load_driver();
  if (load.api == nullptr) {
    scan.note = load.reason;
    return scan;
  }
  const core::cuda::DriverApi& api = *load.api;
  for (int i = 0; i < load.devices; ++i) {
    core::cuda::CUdevice device = 0;
    if (api.cuDeviceGet(&device, i) != core::cuda::kSuccess) continue;
    Gpu gpu{.index = i};
    char text[256] = {};
    if (api.cuDeviceGetName(text, sizeof text - 1, device) == core::cuda::kSuccess) gpu.name = text;
    char bus_id[64] = {};
    if (api.cuDeviceGetPCIBusId(bus_id, sizeof bus_id - 1, device) == core::cuda::kSuccess) gpu.pci_bus_id = bus_id;
    if (!gpu.pci_bus_id.empty()) {
      // The driver writes the bus id in capitals; sysfs names devices in small letters.
      std::string sysfs_id = gpu.pci_bus_id;
      std::transform(sysfs_id.begin(), sysfs_id.end(), sysfs_id.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      if (auto node = read_integer("/sys/bus/pci/devices/" + sysfs_id + "/numa_node"); node && *node >= 0)
        gpu.numa_node = static_cast<int>(*node);
    }
    std::size_t bytes = 0;
    if (api.cuDeviceTotalMem_v2(&bytes, device) == core::cuda::kSuccess) gpu.memory_bytes = bytes;
    auto attribute = [&](int which) {
      int value = 0;
      return api.cuDeviceGetAttribute(&value, which, device) == core::cuda::kSuccess && value != 0;
    };
    gpu.virtual_memory = attribute(core::cuda::kAttrVirtualMemoryManagement);
    gpu.fd_export = attribute(core::cuda::kAttrPosixFdHandles);
    gpu.dma_buf = attribute(core::cuda::kAttrDmaBuf);
    gpu.gpudirect_rdma = attribute(core::cuda::kAttrGpuDirectRdma);
    scan.gpus.push_back(std::move(gpu));
  }
  return scan;
}

}  // namespace

const GpuScan& scan_gpus() {
  static const GpuScan result = scan();
  return result;
}

}  // namespace rdmx::topo
