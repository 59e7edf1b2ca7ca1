// SPDX-License-Identifier: MIT
// rdmx perf fabric: every link between the job's hosts, measured alone and
// in a ring, compared with the others and with its line rate; the links
// that fall short and the rank every slow link goes through are named,
// with the NIC counters that moved meanwhile. Pairs run in rounds (the
// circle method: each rank in at most one pair per round), so a round tests
// disjoint pairs at once as all-pairs sweeps do.
#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "launch/local_job.hpp"
#include "rdmx/bootstrap.hpp"
#include "rdmx/comm.hpp"
#include "rdmx/info.hpp"
#include "report/fabric_report.hpp"

namespace rdmx::cli {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct FabricOptions {
  int np = 0;
  std::string provider;
  std::string size_text = "1M";
  std::size_t size = std::size_t{1} << 20;
  double seconds = 0.5;  // each measurement's target duration
  double threshold = 0.7;
  bool json = false;
};

constexpr std::size_t kName = 128;       // bytes per gathered name
constexpr std::size_t kCounters = 1024;  // bytes per rank's moved counters

// Every rank's text of fewer than `width` bytes, gathered.
std::vector<std::string> gather_text(Communicator& comm, const std::string& mine, std::size_t width = kName) {
  std::vector<char> send(width, '\0');
  std::memcpy(send.data(), mine.data(), std::min(mine.size(), width - 1));
  std::vector<char> all(width * static_cast<std::size_t>(comm.size()));
  comm.all_gather(send.data(), all.data(), width, DataType::Int8);
  std::vector<std::string> out;
  for (int r = 0; r < comm.size(); ++r) out.emplace_back(all.data() + static_cast<std::size_t>(r) * width);
  return out;
}

// The longest interface name that the device's name mentions ("" if none).
const NetInterface* interface_in(const std::string& device, const std::vector<NetInterface>& interfaces) {
  const NetInterface* best = nullptr;
  for (const NetInterface& i : interfaces) {
    if (i.loopback && device.find(i.name + "/") == std::string::npos) continue;
    if (device.find(i.name) != std::string::npos && (best == nullptr || i.name.size() > best->name.size())) best = &i;
  }
  return best;
}

// The network ("10.203.1.0/24") of the interface's address that the device
// names (else its first); "" when unknown.
std::string network_of(const std::string& device, const NetInterface* nic) {
  if (nic == nullptr || nic->addresses.empty()) return "";
  std::string chosen = nic->addresses.front();
  for (const std::string& a : nic->addresses) {
    const std::string host = a.substr(0, a.find('/'));
    if (device.find("/" + host + ":") != std::string::npos || device.find("[" + host + "]") != std::string::npos) {
      chosen = a;
    }
  }
  const std::size_t slash = chosen.find('/');
  if (slash == std::string::npos) return "";
  const int bits = std::atoi(chosen.c_str() + slash + 1);
  const std::string host = chosen.substr(0, slash);
  unsigned char bytes[16] = {};
  const int family = host.find(':') == std::string::npos ? AF_INET : AF_INET6;
  if (inet_pton(family, host.c_str(), bytes) != 1) return "";
  const int length = family == AF_INET ? 4 : 16;
  for (int i = 0; i < length; ++i) {
    const int keep = std::clamp(bits - 8 * i, 0, 8);
    bytes[i] = static_cast<unsigned char>(bytes[i] & (0xff00 >> keep));
  }
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(family, bytes, text, sizeof(text));
  return std::string(text) + "/" + std::to_string(bits);
}

// One direction, `from` to `to`, measured by the receiver: it first times a
// few messages to size the run to about `seconds`, then tells the sender
// how many to send and times them. Other ranks return 0 at once.
double measure_direction(Communicator& comm, int from, int to, std::vector<char>& buf, const FabricOptions& o) {
  const int me = comm.rank();
  if (me != from && me != to) return 0;
  const std::size_t size = o.size;
  std::uint64_t count = 4;  // the probe
  double gbps = 0;
  for (int phase = 0; phase < 2; ++phase) {
    if (me == to) {
      const auto start = Clock::now();
      comm.send(&count, 1, DataType::Uint64, from);
      for (std::uint64_t i = 0; i < count; ++i) comm.recv(buf.data(), size, DataType::Int8, from);
      const double s = std::chrono::duration<double>(Clock::now() - start).count();
      gbps = static_cast<double>(count * size) / s / 1e9;
      count = std::clamp<std::uint64_t>(static_cast<std::uint64_t>(o.seconds * gbps * 1e9 / size), 4, 100000);
    } else {
      comm.recv(&count, 1, DataType::Uint64, to);
      for (std::uint64_t i = 0; i < count; ++i) comm.send(buf.data(), size, DataType::Int8, to);
    }
  }
  return me == to ? gbps : 0;
}

// The circle method: round r pairs position i with position n-1-i of the
// ranks rotated by r around a fixed first one (a dummy when n is odd).
std::vector<std::pair<int, int>> round_pairs(int n, int round) {
  const int m = n % 2 == 0 ? n : n + 1;
  std::vector<int> order(static_cast<std::size_t>(m));
  order[0] = 0;
  for (int i = 1; i < m; ++i) order[static_cast<std::size_t>(i)] = 1 + (i - 1 + round) % (m - 1);
  std::vector<std::pair<int, int>> pairs;
  for (int i = 0; i < m / 2; ++i) {
    const int a = order[static_cast<std::size_t>(i)];
    const int b = order[static_cast<std::size_t>(m - 1 - i)];
    if (a < n && b < n) pairs.emplace_back(std::min(a, b), std::max(a, b));
  }
  return pairs;
}

// The ring: every rank sends to the next while it receives from the one
// before; each rank times what it receives.
double measure_ring(Communicator& comm, std::vector<char>& in, std::vector<char>& out, std::uint64_t count,
                    std::size_t size) {
  const int n = comm.size();
  const int next = (comm.rank() + 1) % n;
  const int prev = (comm.rank() + n - 1) % n;
  comm.barrier();
  const auto start = Clock::now();
  for (std::uint64_t i = 0; i < count; ++i) {
    comm.send_recv(out.data(), size, next, in.data(), size, prev, DataType::Int8);
  }
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>(count * size) / s / 1e9;
}

std::vector<double> gather_doubles(Communicator& comm, const std::vector<double>& mine) {
  std::vector<double> all(mine.size() * static_cast<std::size_t>(comm.size()));
  comm.all_gather(mine.data(), all.data(), mine.size(), DataType::Float64);
  return all;
}

void run_fabric(const FabricOptions& o) {
  std::unique_ptr<Communicator> comm = Communicator::from_env();
  const int n = comm->size();
  const int me = comm->rank();
  const HostTopology topo = discover_topology();
  const std::string device = comm->device_name();
  const NetInterface* nic = interface_in(device, topo.interfaces);
  const std::vector<std::string> hosts = gather_text(*comm, topo.hostname);
  const std::vector<std::string> devices = gather_text(*comm, device);
  const std::vector<std::string> nics = gather_text(*comm, nic != nullptr ? nic->name : "");
  const std::vector<std::string> networks = gather_text(*comm, network_of(device, nic));
  const double line = nic != nullptr && nic->speed_mbps > 0 ? static_cast<double>(nic->speed_mbps) / 8e3 : 0;
  const std::vector<double> lines = gather_doubles(*comm, {line});

  std::vector<NicCounter> before;
  if (nic != nullptr) before = read_nic_counters(nic->name);
  std::vector<char> buf(o.size);
  std::vector<char> out(o.size, 1);
  // received[from]: this rank's measurement of from -> me, alone.
  std::vector<double> received(static_cast<std::size_t>(n), 0.0);
  const int rounds = n % 2 == 0 ? n - 1 : n;
  for (int round = 0; round < rounds; ++round) {
    for (const auto& [a, b] : round_pairs(n, round)) {
      if (hosts[static_cast<std::size_t>(a)] == hosts[static_cast<std::size_t>(b)]) continue;
      if (me != a && me != b) continue;
      const double ab = measure_direction(*comm, a, b, buf, o);
      const double ba = measure_direction(*comm, b, a, buf, o);
      if (me == b) received[static_cast<std::size_t>(a)] = ab;
      if (me == a) received[static_cast<std::size_t>(b)] = ba;
    }
    comm->barrier();  // rounds do not overlap
  }
  const std::vector<double> matrix = gather_doubles(*comm, received);  // [to * n + from]
  double slowest = 0;
  for (double v : matrix) {
    if (v > 0) slowest = slowest == 0 ? v : std::min(slowest, v);
  }
  const double cap = slowest > 0 ? slowest : 1.0;
  const auto ring_count =
      std::clamp<std::uint64_t>(static_cast<std::uint64_t>(o.seconds * cap * 1e9 / o.size), 4, 100000);
  const std::vector<double> ring = gather_doubles(*comm, {measure_ring(*comm, buf, out, ring_count, o.size)});

  std::vector<NicCounter> after;
  if (nic != nullptr) after = read_nic_counters(nic->name);
  // "name=delta;...": whole items only, as many as fit.
  std::string moved_text;
  for (const NicCounter& c : after) {
    for (const NicCounter& b : before) {
      if (b.name != c.name || c.value <= b.value) continue;
      const std::string item = c.name + "=" + std::to_string(c.value - b.value);
      if (moved_text.size() + item.size() + 1 < kCounters) moved_text += (moved_text.empty() ? "" : ";") + item;
    }
  }
  const std::vector<std::string> counters = gather_text(*comm, moved_text, kCounters);
  if (me != 0) return;

  fabric::Analysis input{.threshold = o.threshold};
  auto add = [&](const char* pattern, int from, int to, double gbps) {
    const auto f = static_cast<std::size_t>(from);
    input.links.push_back({.pattern = pattern,
                           .from = from,
                           .to = to,
                           .from_host = hosts[f],
                           .to_host = hosts[static_cast<std::size_t>(to)],
                           .device = devices[f],
                           .interface = nics[f],
                           .to_interface = nics[static_cast<std::size_t>(to)],
                           .gbps = gbps,
                           .line_gbps = lines[f],
                           .across_networks = !networks[f].empty() && !networks[static_cast<std::size_t>(to)].empty() &&
                                              networks[f] != networks[static_cast<std::size_t>(to)]});
  };
  for (int to = 0; to < n; ++to) {
    for (int from = 0; from < n; ++from) {
      const double v = matrix[static_cast<std::size_t>(to * n + from)];
      if (v > 0) add("pairs", from, to, v);
    }
  }
  for (int to = 0; to < n; ++to) {
    const int from = (to + n - 1) % n;
    if (hosts[static_cast<std::size_t>(from)] != hosts[static_cast<std::size_t>(to)]) {
      add("ring", from, to, ring[static_cast<std::size_t>(to)]);
    }
  }
  for (int r = 0; r < n; ++r) {
    std::string text = counters[static_cast<std::size_t>(r)];
    for (std::size_t start = 0; start < text.size();) {
      const std::size_t end = std::min(text.find(';', start), text.size());
      const std::string item = text.substr(start, end - start);
      const std::size_t eq = item.rfind('=');
      if (eq != std::string::npos) {
        input.counters.push_back({.rank = r,
                                  .host = hosts[static_cast<std::size_t>(r)],
                                  .interface = nics[static_cast<std::size_t>(r)],
                                  .name = item.substr(0, eq),
                                  .delta = std::atoll(item.c_str() + eq + 1)});
      }
      start = end + 1;
    }
  }
  json doc = fabric::analyse(input);
  std::vector<std::string> distinct = hosts;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  doc["schema"] = "rdmx.perf_fabric/1";
  doc["ranks"] = n;
  doc["hosts"] = distinct;
  doc["message_bytes"] = o.size;
  if (o.json) {
    std::printf("%s\n", doc.dump(1).c_str());
  } else {
    std::printf("# rdmx perf fabric: %d ranks on %zu hosts, %s messages\n%s", n, distinct.size(), o.size_text.c_str(),
                fabric::describe(doc).c_str());
  }
  std::fflush(stdout);
}

}  // namespace

void register_perf_fabric(CLI::App& perf) {
  auto o = std::make_shared<FabricOptions>();
  CLI::App* cmd = perf.add_subcommand(
      "fabric",
      "every link between the job's hosts: each pair of ranks alone (each direction) and a ring, against the "
      "others and the line rate; names the slow links, the rank they all go through, and NIC counters that moved");
  cmd->add_option("--np", o->np, "local ranks to start when no launcher started this (default 2)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--provider", o->provider, "sets RDMX_PROVIDER: shm, verbs, tcp or auto")->check(provider_names());
  cmd->add_option("-s,--size", o->size_text, "message size (default 1M)");
  cmd->add_option("--seconds", o->seconds, "how long each measurement lasts, about (default 0.5)")
      ->check(CLI::Range(0.01, 60.0));
  cmd->add_option("--threshold", o->threshold,
                  "a link below this fraction of its pattern's upper quartile is slow (0.7)")
      ->check(CLI::Range(0.05, 1.0));
  cmd->add_flag("--json", o->json, "print one JSON document (docs/schemas/perf_fabric.schema.json)");
  cmd->callback([o] {
    o->size = parse_size(o->size_text, "--size", std::size_t{1} << 30);
    if (!o->provider.empty()) ::setenv("RDMX_PROVIDER", o->provider.c_str(), 1);
    if (run_self_as_local_ranks(o->np > 0 ? o->np : 2, "rdmx perf fabric")) return;
    run_fabric(*o);
  });
}

}  // namespace rdmx::cli
