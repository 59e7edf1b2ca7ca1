// SPDX-License-Identifier: MIT
// What `rdmx doctor` concludes from what each host of a job reported (its
// interfaces, where its ranks listen, its RDMA ports and GPUs) and from the
// probes every host made to every other: which interfaces reach which
// peers, MTU mismatches, firewalled ports, RoCE GID versions, clock skew and
// GPU-NIC affinity, each finding with the setting or command that fixes it.
// Pure functions of those documents, so tests give them documents directly.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace rdmx::cli::doctor {

// A host's facts (one per host, from its first rank):
//   {"host", "rank", "ranks": [..], "socket_ifname": null|"..", "listen_ports": "any"|"A-B",
//    "socket_interface": {"usable", "name", "address", "why", "skipped": [{"name", "address", "reason"}]},
//    "interfaces": [{"name", "address", "prefix", "mtu", "speed_mbps", "numa_node", "port", "listen_error"}],
//    "rdma": [{"device", "port", "state", "link_layer", "gids": [{"index", "gid", "type", "netdev"}]}],
//    "gid_index": "auto"|"N", "gpus": [{"index", "name", "numa_node"}], "gpu_note"}
// A probe (a TCP connection from one host's address to another's listener):
//   {"from_host", "from_interface", "from_address", "to_host", "to_interface", "to_address", "port",
//    "result": "ok"|"refused"|"timeout"|"unreachable"|"wrong answer"|"error", "detail", "rtt_ms", "offset_ms"}
// with from_host and to_host indices into `hosts`, and offset_ms the peer's
// clock minus this one's (ok probes only).
struct Input {
  nlohmann::json hosts = nlohmann::json::array();
  nlohmann::json probes = nlohmann::json::array();
  double skew_ms = 50;  // clocks further apart than this are a finding
};

// The rdmx.doctor/1 document (docs/schemas/doctor.schema.json) without the
// run's own fields (ranks, store), which the caller adds: hosts and probes as
// given, "clock" (each host against the first), "roce" (the GID each RoCE
// port would use), "findings" ({"severity": "problem"|"warning"|"note",
// "topic", "host", "message", "fix"}) and "problems" (how many findings are
// problems).
nlohmann::json analyse(const Input& input);

// The document for a terminal.
std::string describe(const nlohmann::json& document);

}  // namespace rdmx::cli::doctor
