// SPDX-License-Identifier: MIT
// rdmx/info.hpp: what this host has and what rdmx would pick, for `rdmx info`
// and for tools that choose among providers without naming them.
//
// Nothing here opens a connection or changes state; every call is cheap
// enough to run at start-up. Facts that cannot be read (no permission, no
// sysfs) are left empty and the matching `*_note` says why.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "rdmx/verbs.hpp"

#include "rdmx/export.hpp"

RDMX_API_BEGIN

namespace rdmx {

// ---------------------------------------------------------------------------
// Providers
struct ProviderStatus {
  std::string name;     // "shm", "tcp", "verbs"
  bool built = false;   // compiled into this library
  bool usable = false;  // a device opens on this host now
  std::string reason;   // why usable, or exactly why not (e.g. "no RDMA device: /sys/class/infiniband is empty")
  std::string device;   // Device::name() when usable
  DeviceCaps caps;      // when usable
};
// Every provider rdmx knows, built or not, in auto selection's order.
std::vector<ProviderStatus> probe_providers();

// What each provider declares before any device opens, in auto selection's
// order, built or not: the figures a cost model starts from where nothing
// was measured, and the memory a same-host connection maps.
struct ProviderDeclaration {
  std::string name;
  bool built = false;
  double latency_us = 0;      // one small message, one way
  double bandwidth_gbps = 0;  // GB/s (1e9 bytes) of one large transfer
  std::string basis;          // where the figures come from
  std::size_t same_host_connection_memory = 0;
};
std::vector<ProviderDeclaration> declared_providers();

// What open_device("auto") gives an application that names no provider
// (RDMX_PROVIDER unset), and why; reason holds the error when none opens.
struct AutoChoice {
  bool usable = false;
  std::string provider;
  std::string device;
  std::string reason;
};
AutoChoice probe_auto();

// ---------------------------------------------------------------------------
// CUDA device memory: whether this process can register and move it (the
// driver is loaded at run time, so a build without CUDA and a host without a
// GPU both run as before), and the GPU reduction kernels built in. How each
// provider serves it is in its caps (DeviceCaps::cuda_memory).
struct CudaStatus {
  bool usable = false;       // a CUDA driver with at least one GPU
  std::string reason;        // "CUDA driver 13.0 with 1 GPU", or exactly why not
  int driver_version = 0;    // 13000 for CUDA 13.0; 0 without a driver
  bool kernels = false;      // the reduction kernels were compiled in (nvcc found at build time)
  std::string kernels_note;  // their GPU architectures, or why they were not built
};
CudaStatus probe_cuda();

// ---------------------------------------------------------------------------
// Whether the connections this process accepts and makes over a network (tcp
// QPs, the TCP store) prove a job secret (RDMX_AUTH_KEY or RDMX_AUTH_KEY_FILE).
struct AuthStatus {
  bool authenticated = false;
  std::string how;  // where the secret comes from, or why connections are not authenticated
};
AuthStatus probe_auth();

// ---------------------------------------------------------------------------
// Sockets: the interface the tcp provider and the control mesh listen on,
// and the ports their listeners may take. RDMX_SOCKET_IFNAME chooses by
// name; without it, the interface the route to the job's store (as the
// launcher's variables name it) leaves by, so an interface on a network
// without the job's peers is skipped; else the first one up that is not
// loopback or docker*.
struct SkippedInterface {
  std::string name;
  std::string address;
  std::string reason;
};
struct SocketInterfaceChoice {
  bool usable = false;
  std::string name;     // "eth0"
  std::string address;  // "10.0.0.1" (no port)
  std::string why;      // how it was chosen, or the error when none fits
  std::vector<SkippedInterface> skipped;
};
SocketInterfaceChoice socket_interface();
// RDMX_PORT_RANGE: listeners take a port from first to last; 0 and 0: any
// the kernel gives. Throws rdmx::Error (Config) when the setting is malformed.
struct ListenPorts {
  std::uint16_t first = 0;
  std::uint16_t last = 0;
  std::string text;  // "40000-40999" or "any"
};
ListenPorts listen_ports();

// ---------------------------------------------------------------------------
// Settings in force
struct Setting {
  std::string name;           // "RDMX_TIMEOUT"
  std::string value;          // the value in force (the default when unset)
  bool from_env = false;      // set in the environment (else the default)
  std::string meaning;        // one line
  std::string default_value;  // as it would be written in the environment; empty for an unknown variable
};
// Every RDMX_* setting the library reads, and any other RDMX_* variable set in
// the environment (marked "not a known setting" so typos show).
std::vector<Setting> settings();
// RDMX_TIMEOUT as parsed by the library: the bound on every blocking wait.
std::chrono::milliseconds default_timeout();

// ---------------------------------------------------------------------------
// Host topology (src/topo)
struct RdmaGid {
  int index = 0;
  std::string gid;     // "fe80:0000:...:" as sysfs prints it
  std::string type;    // "IB/RoCE v1", "RoCE v2" (sysfs gid_attrs/types)
  std::string netdev;  // gid_attrs/ndevs, RoCE only
};
struct RdmaPort {
  int number = 0;
  std::string state;          // "ACTIVE", "DOWN", ...
  std::string link_layer;     // "InfiniBand", "Ethernet"
  std::string rate;           // "100 Gb/sec (4X EDR)"
  int lid = 0;                // InfiniBand only
  std::vector<RdmaGid> gids;  // non-zero GIDs only
};
struct RdmaDevice {
  std::string name;  // "mlx5_0", "rxe0"
  std::string node_guid;
  std::vector<RdmaPort> ports;
};
struct NetInterface {
  std::string name;
  std::vector<std::string> addresses;  // "10.0.0.1/24", "fe80::1/64"
  bool up = false;
  bool loopback = false;
  int mtu = 0;
  long speed_mbps = -1;  // -1: unknown (virtual interfaces, down links)
  int numa_node = -1;    // -1: unknown or not a PCI device
};
struct NumaNode {
  int index = 0;
  std::vector<int> cpus;  // logical CPU numbers
  std::uint64_t memory_bytes = 0;
};
struct Gpu {
  int index = 0;
  std::string name;
  std::string pci_bus_id;
  int numa_node = -1;  // -1: unknown (sysfs does not say, or one node only)
  std::uint64_t memory_bytes = 0;
  // What the driver says the GPU supports, for sharing its memory:
  bool virtual_memory = false;  // cuMemCreate/cuMemMap (VMM), and with it
  bool fd_export = false;       // exporting allocations as POSIX file descriptors (CUDA IPC of VMM memory)
  bool dma_buf = false;         // dma-buf export (GPUDirect RDMA through ibv_reg_dmabuf_mr)
  bool gpudirect_rdma = false;  // GPUDirect RDMA at all (nvidia-peermem or dma-buf)
};
struct HostTopology {
  std::string hostname;
  int cores = 0;         // physical cores
  int logical_cpus = 0;  // hardware threads
  std::vector<NumaNode> numa_nodes;
  std::string cpu_note;  // why the counts above are 0, when they are
  std::vector<NetInterface> interfaces;
  std::vector<RdmaDevice> rdma_devices;
  std::string rdma_note;  // why rdma_devices is empty, when it is
  std::vector<Gpu> gpus;
  std::string gpu_note;  // why gpus is empty, when it is
};
HostTopology discover_topology();

// The counters of a network interface that tell a bad link (drops,
// errors), with those of the RDMA ports on it (a RoCE port on that netdev,
// or the device of that name: its counters and hw_counters, retransmissions
// and congestion notifications included) and this network namespace's TCP
// retransmissions, each named where it was read ("rx_dropped",
// "mlx5_0/1/hw_counters/out_of_sequence", "tcp/RetransSegs"). Sample before
// and after traffic and compare. Counters that cannot be read are absent.
struct NicCounter {
  std::string name;
  std::int64_t value = 0;
};
std::vector<NicCounter> read_nic_counters(const std::string& interface);

// ---------------------------------------------------------------------------
// Everything above as one JSON document (`rdmx info --json`, rdmx.info() in
// Python), following docs/schemas/info.schema.json; `indent` as in JSON
// pretty-printers (negative: one line).
std::string info_json(int indent = 2);

}  // namespace rdmx
RDMX_API_END
