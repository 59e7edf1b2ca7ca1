// SPDX-License-Identifier: MIT
// What rdmx plan knows of a fabric: the costs its model charges a message,
// a byte and a reduction, read from a profile file users can edit
// (tools/rdmx/plan/data/fabrics.json is the built-in one; rdmx plan calibrate writes
// one from measurement). Every value may carry its source.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rdmx::cli::plan {

struct Fabric {
  std::string name;         // the key users pass to --fabrics ("ib-ndr")
  std::string description;  // one line for tables and the report
  // One message between nodes as a collective's step sees it: the wire and
  // switch, the NIC, and the communication library's own per-step cost.
  double latency_us = 5;
  double nic_gbit = 100;        // line rate of one NIC, Gbit/s
  double efficiency = 0.9;      // share of the line rate a large transfer reaches
  int nics_per_node = 1;        // NICs a node's ranks share for traffic between nodes
  bool gpudirect = true;        // GPU memory goes to the NIC without a host copy
  double staging_gb_s = 25;     // host staging (each direction, per node) when not gpudirect
  double intra_latency_us = 2;  // one step between ranks of a node
  double intra_gb_s = 100;      // one rank's bandwidth to another of its node, GB/s
  double reduce_gb_s = 500;     // bytes a rank reduces per second (GB/s)
  // The GPUs of a node ("H100"): which of NCCL's per-generation tables
  // apply, and what compute measured on other GPUs must be warned about.
  std::string gpu = "H100";
  std::string intra_link = "nvlink";  // "nvlink" or "pci": how the GPUs of a node reach each other
  // "rdma" (GPUDirect or host RDMA through NCCL's IB/RoCE transport) or
  // "socket" (NCCL's socket transport: a CPU proxy copies through host
  // memory and TCP), which reaches a smaller share of the line rate.
  std::string transport = "rdma";
  // NCCL's channels between nodes (0: as its search picks them, two per NIC).
  int nccl_channels = 0;
  // What a node's share of the fabric costs per hour against the others, for
  // ranking fabrics when no price file is given (0: unknown).
  double relative_cost = 0;
  std::map<std::string, std::string> sources;  // field -> where the value comes from

  // Bytes per second a node sends to the network, its NICs together, when
  // one GPU drives each NIC.
  double node_net_bytes_per_s() const;
  // The share of that a socket transport keeps when `ranks_per_node` GPUs
  // share the node's NICs (1 for RDMA, or up to four GPUs per NIC).
  double socket_share(int ranks_per_node) const;
  // What a node's `ranks_per_node` GPUs get from the network together.
  double node_net_bytes_per_s(int ranks_per_node) const {
    return node_net_bytes_per_s() * socket_share(ranks_per_node);
  }
  // Per-byte cost of one NIC as the model charges it, ns.
  double byte_ns() const { return 8.0 / (nic_gbit * efficiency); }
};

// The fabrics of a profile document ({"fabrics": {name: {...}}}). Throws
// rdmx::Error naming the file, the fabric and the field for anything missing,
// mistyped or out of range.
std::vector<Fabric> parse_fabrics(const nlohmann::json& doc, const std::string& origin);
nlohmann::json fabric_to_json(const Fabric& fabric);

// The built-in profiles (tools/rdmx/plan/data/fabrics.json, compiled in) and, when
// `path` is not empty, those of that file in their place.
std::vector<Fabric> load_fabrics(const std::string& path);
const std::string& builtin_fabrics_text();

// The fabric's name with its links, as every output shows it:
// "tcp-100 (1x100G)".
std::string fabric_label(const Fabric& fabric);

// The fabric on other links: `nics` NICs of `nic_gbit` per node, its
// transport's efficiency, latency, staging and relative cost unchanged,
// and sources saying why (`why`).
Fabric on_links(const Fabric& fabric, int nics, double nic_gbit, const std::string& why);

// The named fabric, or an error listing those known.
const Fabric& find_fabric(const std::vector<Fabric>& fabrics, const std::string& name);

}  // namespace rdmx::cli::plan
