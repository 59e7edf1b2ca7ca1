// SPDX-License-Identifier: MIT
// rdmx doctor: run as the ranks of a job (any launcher, or `rdmx run`), it
// checks what a job needs of its hosts before the job needs it. The first
// rank of each host reports the host's interfaces, where its ranks would
// listen, its RoCE ports and GPUs, listens on every address, and probes
// every address of every other host from each of its own; rank 0 reads it
// all from the store and prints the findings. Only the store is used, so it
// works where a communicator would not connect.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "doctor/doctor_probe.hpp"
#include "launch/local_job.hpp"
#include "rdmx/bootstrap.hpp"
#include "rdmx/error.hpp"
#include "rdmx/info.hpp"
#include "report/doctor_report.hpp"

namespace rdmx::cli {
namespace {

using nlohmann::json;

struct DoctorOptions {
  int np = 0;
  bool json = false;
  double probe_seconds = 2;
  double skew_ms = 50;
};

const std::string kPrefix = "rdmx-doctor/";

std::string this_host() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

std::string setting_value(const std::string& name) {
  for (const Setting& s : settings()) {
    if (s.name == name) return s.value;
  }
  return "";
}

// This host's addresses that peers could reach: up, not loopback, and not
// IPv6 link-local (which needs a scope a peer cannot know).
std::vector<doctor::LocalAddress> reachable_addresses(const HostTopology& topology) {
  std::vector<doctor::LocalAddress> out;
  for (const NetInterface& i : topology.interfaces) {
    if (!i.up || i.loopback) continue;
    for (const std::string& a : i.addresses) {
      const std::size_t slash = a.find('/');
      const std::string address = a.substr(0, slash);
      if (address.rfind("fe80", 0) == 0) continue;
      out.push_back({i.name, address, slash == std::string::npos ? 0 : std::atoi(a.c_str() + slash + 1)});
    }
  }
  return out;
}

json host_facts(const HostTopology& topology, const std::vector<doctor::LocalAddress>& addresses,
                const doctor::Listeners& listeners, const ListenPorts& ports) {
  json facts;
  facts["host"] = this_host();
  const char* ifname = std::getenv("RDMX_SOCKET_IFNAME");
  facts["socket_ifname"] = ifname != nullptr && *ifname != '\0' ? json(ifname) : json(nullptr);
  facts["listen_ports"] = ports.text;
  const SocketInterfaceChoice socket = socket_interface();
  json skipped = json::array();
  for (const auto& s : socket.skipped)
    skipped.push_back({{"name", s.name}, {"address", s.address}, {"reason", s.reason}});
  facts["socket_interface"] = {{"usable", socket.usable},
                               {"name", socket.name},
                               {"address", socket.address},
                               {"why", socket.why},
                               {"skipped", skipped}};
  json interfaces = json::array();
  for (std::size_t k = 0; k < addresses.size(); ++k) {
    const auto it = std::find_if(topology.interfaces.begin(), topology.interfaces.end(),
                                 [&](const NetInterface& i) { return i.name == addresses[k].interface; });
    interfaces.push_back({{"name", addresses[k].interface},
                          {"address", addresses[k].address},
                          {"prefix", addresses[k].prefix},
                          {"mtu", it->mtu},
                          {"speed_mbps", it->speed_mbps},
                          {"numa_node", it->numa_node},
                          {"port", listeners.ports()[k]},
                          {"listen_error", listeners.errors()[k]}});
  }
  facts["interfaces"] = interfaces;
  json rdma = json::array();
  for (const RdmaDevice& d : topology.rdma_devices) {
    for (const RdmaPort& p : d.ports) {
      json gids = json::array();
      for (const RdmaGid& g : p.gids) {
        gids.push_back({{"index", g.index}, {"gid", g.gid}, {"type", g.type}, {"netdev", g.netdev}});
      }
      rdma.push_back(
          {{"device", d.name}, {"port", p.number}, {"state", p.state}, {"link_layer", p.link_layer}, {"gids", gids}});
    }
  }
  facts["rdma"] = rdma;
  facts["gid_index"] = setting_value("RDMX_IB_GID_INDEX");
  json gpus = json::array();
  for (const Gpu& g : topology.gpus) gpus.push_back({{"index", g.index}, {"name", g.name}, {"numa_node", g.numa_node}});
  facts["gpus"] = gpus;
  facts["gpu_note"] = topology.gpu_note;
  return facts;
}

std::vector<std::string> rank_keys(const std::string& what, const std::vector<int>& ranks) {
  std::vector<std::string> keys;
  for (int r : ranks) keys.push_back(kPrefix + what + "/" + std::to_string(r));
  return keys;
}

void run_doctor(const DoctorOptions& o) {
  Bootstrap boot = from_env();
  Store& store = *boot.store;
  const int me = boot.info.rank;
  const int n = boot.info.world_size;
  store.set(kPrefix + "host/" + std::to_string(me), this_host());
  std::vector<int> everyone(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) everyone[static_cast<std::size_t>(r)] = r;
  store.wait(rank_keys("host", everyone));
  // The first rank of each host speaks for it.
  std::vector<int> leaders;
  std::map<std::string, std::vector<int>> ranks_of;
  for (int r = 0; r < n; ++r) {
    const std::string host = store.get_string(kPrefix + "host/" + std::to_string(r));
    if (ranks_of[host].empty()) leaders.push_back(r);
    ranks_of[host].push_back(r);
  }
  const auto leave = [&] { store.set(kPrefix + "left/" + std::to_string(me), ""); };
  if (std::find(leaders.begin(), leaders.end(), me) == leaders.end()) {
    leave();
    return;
  }

  const HostTopology topology = discover_topology();
  const ListenPorts ports = listen_ports();
  const std::vector<doctor::LocalAddress> addresses = reachable_addresses(topology);
  doctor::Listeners listeners(addresses, ports.first, ports.last);
  json facts = host_facts(topology, addresses, listeners, ports);
  facts["rank"] = me;
  facts["ranks"] = ranks_of[facts["host"].get<std::string>()];
  store.set(kPrefix + "facts/" + std::to_string(me), facts.dump());
  store.wait(rank_keys("facts", leaders));

  json hosts = json::array();
  for (int r : leaders) hosts.push_back(json::parse(store.get_string(kPrefix + "facts/" + std::to_string(r))));
  const int self = static_cast<int>(std::find(leaders.begin(), leaders.end(), me) - leaders.begin());
  std::vector<doctor::ProbeTarget> targets;
  json probes = json::array();
  for (std::size_t h = 0; h < hosts.size(); ++h) {
    if (static_cast<int>(h) == self) continue;
    for (const json& to : hosts[h]["interfaces"]) {
      if (to["port"].get<int>() == 0) continue;
      for (const doctor::LocalAddress& from : addresses) {
        const bool from_v6 = from.address.find(':') != std::string::npos;
        if (from_v6 != (to["address"].get<std::string>().find(':') != std::string::npos)) continue;
        targets.push_back({from.address, to["address"], to["port"]});
        probes.push_back({{"from_host", self},
                          {"from_interface", from.interface},
                          {"from_address", from.address},
                          {"to_host", static_cast<int>(h)},
                          {"to_interface", to["name"]},
                          {"to_address", to["address"]},
                          {"port", to["port"]}});
      }
    }
  }
  const std::vector<doctor::ProbeResult> results = doctor::probe_all(targets, o.probe_seconds);
  for (std::size_t k = 0; k < results.size(); ++k) {
    probes[k]["result"] = results[k].result;
    probes[k]["detail"] = results[k].detail;
    probes[k]["rtt_ms"] = results[k].rtt_ms;
    probes[k]["offset_ms"] = results[k].offset_ms;
  }
  store.set(kPrefix + "probes/" + std::to_string(me), probes.dump());
  // Listen until every host has probed this one.
  store.wait(rank_keys("probes", leaders));
  if (me != 0) {
    leave();
    return;
  }

  doctor::Input input{.hosts = hosts, .skew_ms = o.skew_ms};
  for (int r : leaders) {
    for (json& p : json::parse(store.get_string(kPrefix + "probes/" + std::to_string(r)))) input.probes.push_back(p);
  }
  json doc = doctor::analyse(input);
  doc["schema"] = "rdmx.doctor/1";
  doc["ranks"] = n;
  doc["store"] = boot.info.store_file.empty() ? boot.info.store_host + ":" + std::to_string(boot.info.store_port)
                                              : "file:" + boot.info.store_file;
  if (o.json) {
    std::printf("%s\n", doc.dump(1).c_str());
  } else {
    std::printf("# rdmx doctor: %d ranks on %zu hosts, store %s\n%s", n, hosts.size(),
                doc["store"].get<std::string>().c_str(), doctor::describe(doc).c_str());
  }
  std::fflush(stdout);
  // Rank 0 serves the store: it stays until every other rank stopped using
  // it, then leaves the store as it found it (a standalone store may see
  // another doctor run, which must not read this one's keys).
  std::vector<int> others(everyone.begin() + 1, everyone.end());
  store.wait(rank_keys("left", others));
  for (const char* what : {"host", "left"}) {
    for (const std::string& key : rank_keys(what, everyone)) store.remove(key);
  }
  for (const char* what : {"facts", "probes"}) {
    for (const std::string& key : rank_keys(what, leaders)) store.remove(key);
  }
  if (doc["problems"].get<int>() > 0) throw ExitStatus{kExitError};
}

}  // namespace

void register_doctor(CLI::App& root) {
  auto o = std::make_shared<DoctorOptions>();
  CLI::App* cmd = root.add_subcommand(
      "doctor",
      "check the hosts of a job before it runs: which interfaces reach which hosts (and which one ranks listen on, "
      "and why), MTU mismatches, firewalled ports, RoCE GIDs, clock skew, GPU-NIC affinity; each finding with the "
      "setting that fixes it. Run it as the job's ranks (rdmx run, torchrun, srun, mpirun, or RDMX_* variables)");
  cmd->add_option("--np", o->np, "local ranks to start when no launcher started this (default 1)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--probe-timeout", o->probe_seconds, "seconds each connection probe may take (default 2)")
      ->check(CLI::Range(0.05, 60.0));
  cmd->add_option("--skew-ms", o->skew_ms, "clocks further apart than this are a finding (default 50)")
      ->check(CLI::Range(0.0, 1e7));
  cmd->add_flag("--json", o->json, "print one JSON document (docs/schemas/doctor.schema.json)");
  cmd->callback([o] {
    if (run_self_as_local_ranks(o->np > 0 ? o->np : 1, "rdmx doctor")) return;
    run_doctor(*o);
  });
}

}  // namespace rdmx::cli
