// SPDX-License-Identifier: MIT
#include "report/doctor_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace rdmx::cli::doctor {
namespace {

using nlohmann::json;

std::string text_of(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_null()) return "";
  return value.dump();
}

std::string fixed(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.*f", digits, value);
  return text;
}

class Findings {
 public:
  void add(const char* severity, const char* topic, const std::string& host, const std::string& message,
           const std::string& fix) {
    list_.push_back({{"severity", severity}, {"topic", topic}, {"host", host}, {"message", message}, {"fix", fix}});
  }
  json take() {
    // Problems first, then warnings, then notes; in the order found within each.
    std::stable_sort(list_.begin(), list_.end(), [](const json& a, const json& b) {
      auto weight = [](const json& f) {
        const std::string s = f["severity"];
        return s == "problem" ? 0 : s == "warning" ? 1 : 2;
      };
      return weight(a) < weight(b);
    });
    return std::move(list_);
  }

 private:
  json list_ = json::array();
};

struct Endpoint {
  int host;
  std::string interface;
  std::string address;
  bool operator<(const Endpoint& o) const {
    return std::tie(host, interface, address) < std::tie(o.host, o.interface, o.address);
  }
};

// "timeout x2, unreachable" for the results of some probes.
std::string summarise(const std::vector<const json*>& probes) {
  std::map<std::string, int> counts;
  for (const json* p : probes) ++counts[(*p)["result"].get<std::string>()];
  std::string out;
  for (const auto& [result, count] : counts) {
    out += (out.empty() ? "" : ", ") + result + (count > 1 ? " x" + std::to_string(count) : "");
  }
  return out;
}

std::string host_name(const json& hosts, int index) { return hosts[static_cast<std::size_t>(index)]["host"]; }

void check_interfaces(const Input& in, Findings& findings) {
  const json& hosts = in.hosts;
  if (hosts.size() < 2) return;
  std::map<Endpoint, std::vector<const json*>> outgoing, incoming;
  for (const json& p : in.probes) {
    outgoing[{p["from_host"], p["from_interface"], p["from_address"]}].push_back(&p);
    incoming[{p["to_host"], p["to_interface"], p["to_address"]}].push_back(&p);
  }
  for (std::size_t h = 0; h < hosts.size(); ++h) {
    const json& host = hosts[h];
    const json& chosen = host["socket_interface"];
    const std::string chosen_address = text_of(chosen["address"]);
    const std::string ifname = text_of(host["socket_ifname"]);
    std::set<std::string> good;  // interfaces that reach every other host both ways
    std::vector<std::pair<const json*, std::string>> bad;
    for (const json& e : host["interfaces"]) {
      const Endpoint self{static_cast<int>(h), e["name"], e["address"]};
      std::set<int> reached;
      std::vector<const json*> failed_to, failed_from;
      for (const json* p : incoming[self]) {
        if ((*p)["result"] == "ok") reached.insert((*p)["from_host"].get<int>());
        if ((*p)["result"] != "ok") failed_to.push_back(p);
      }
      for (const json* p : outgoing[self]) {
        if ((*p)["result"] == "ok") reached.insert((*p)["to_host"].get<int>());
        if ((*p)["result"] != "ok") failed_from.push_back(p);
      }
      std::string failures;
      if (!failed_to.empty()) failures += "to it: " + summarise(failed_to);
      if (!failed_from.empty())
        failures += (failures.empty() ? "" : "; ") + std::string("from it: ") + summarise(failed_from);
      if (reached.size() + 1 == hosts.size()) {
        good.insert(e["name"].get<std::string>());
        continue;
      }
      std::string missing;
      for (std::size_t o = 0; o < hosts.size(); ++o) {
        if (o != h && !reached.count(static_cast<int>(o)))
          missing += (missing.empty() ? "" : ", ") + host_name(hosts, static_cast<int>(o));
      }
      const std::string text = e["name"].get<std::string>() + " (" + e["address"].get<std::string>() + ")" +
                               (reached.empty() ? " reaches no other host of the job" : " does not reach " + missing) +
                               (failures.empty() ? "" : " (" + failures + ")");
      bad.emplace_back(&e, text);
    }
    std::string good_names;
    for (const auto& g : good) good_names += (good_names.empty() ? "" : ",") + g;
    for (const auto& [e, text] : bad) {
      const bool used = (*e)["address"] == chosen_address;
      if (!used) {
        findings.add(
            "note", "interface", host["host"],
            text + "; ranks do not use it: they listen on " + text_of(chosen["name"]) + " (" + chosen_address + ")",
            good.count(text_of(chosen["name"])) && ifname.empty()
                ? "nothing to do; to pin the choice, RDMX_SOCKET_IFNAME==" + text_of(chosen["name"])
                : "see the findings on " + text_of(chosen["name"]));
        continue;
      }
      std::string fix;
      if (!good.empty()) {
        fix = ifname.empty() ? "set RDMX_SOCKET_IFNAME==" + good_names + " on this host (it reaches every host)"
                             : "RDMX_SOCKET_IFNAME=" + ifname + " picks it: on this host set it to =" + good_names +
                                   " (it reaches every host), or unset it so that ranks take the interface the route "
                                   "to the store leaves by";
      } else {
        fix =
            "no interface of this host reaches every other host: check cabling, routes (ip route get <peer>) and "
            "firewalls; ranks need their listener ports open (RDMX_PORT_RANGE=FIRST-LAST, then open that range)";
      }
      findings.add("problem", "interface", host["host"], "ranks listen on " + text, fix);
    }
  }
}

void check_ports(const Input& in, Findings& findings) {
  std::set<std::pair<int, std::string>> said;
  for (const json& host : in.hosts) {
    for (const json& e : host["interfaces"]) {
      const std::string error = text_of(e["listen_error"]);
      if (error.empty()) continue;
      findings.add("problem", "ports", host["host"],
                   "cannot listen on " + e["name"].get<std::string>() + " (" + e["address"].get<std::string>() +
                       ") with ports " + text_of(host["listen_ports"]) + ": " + error,
                   "RDMX_PORT_RANGE needs a free port per listener: each rank takes two; widen the range");
    }
  }
  for (const json& p : in.probes) {
    if (p["result"] != "refused") continue;
    const int to = p["to_host"];
    if (!said.insert({to, p["to_address"]}).second) continue;
    const json& host = in.hosts[static_cast<std::size_t>(to)];
    const std::string range = text_of(host["listen_ports"]);
    findings.add(
        "problem", "ports", host["host"],
        "connections to " + p["to_address"].get<std::string>() + " port " + std::to_string(p["port"].get<int>()) +
            " are refused although rdmx doctor listens there: a firewall rejects them",
        range == "any" ? "set RDMX_PORT_RANGE=FIRST-LAST on every rank and open that range in the firewall (e.g. nft "
                         "add rule inet filter input tcp dport FIRST-LAST accept)"
                       : "open RDMX_PORT_RANGE=" + range +
                             " in this host's firewall (e.g. nft add rule inet filter "
                             "input tcp dport " +
                             range + " accept)");
  }
}

void check_mtu(const Input& in, Findings& findings) {
  std::map<std::pair<int, std::string>, int> mtu;
  for (std::size_t h = 0; h < in.hosts.size(); ++h) {
    for (const json& e : in.hosts[h]["interfaces"]) mtu[{static_cast<int>(h), e["name"]}] = e["mtu"];
  }
  std::set<std::string> said;
  for (const json& p : in.probes) {
    if (p["result"] != "ok") continue;
    const int a = mtu[{p["from_host"], p["from_interface"]}];
    const int b = mtu[{p["to_host"], p["to_interface"]}];
    if (a == b || a == 0 || b == 0) continue;
    const std::string left = host_name(in.hosts, p["from_host"]) + " " + p["from_interface"].get<std::string>();
    const std::string right = host_name(in.hosts, p["to_host"]) + " " + p["to_interface"].get<std::string>();
    if (!said.insert(std::min(left, right) + "|" + std::max(left, right)).second) continue;
    findings.add("warning", "mtu", host_name(in.hosts, p["from_host"]),
                 "MTU " + std::to_string(a) + " on " + left + " but " + std::to_string(b) + " on " + right +
                     ", which it reaches: larger frames are dropped or fragmented between them, and a RoCE path "
                     "MTU follows the smaller",
                 "give both ends and the switch ports between them one MTU (ip link set dev IFACE mtu " +
                     std::to_string(std::min(a, b)) + ", or raise the other)");
  }
}

// The GID a RoCE port uses: RDMX_IB_GID_INDEX, else a RoCE v2 entry with an
// IPv4-mapped address, else any RoCE v2, else RoCE v1, as the verbs provider picks.
json pick_gid(const json& gids, const std::string& forced) {
  if (forced != "auto" && !forced.empty()) {
    for (const json& g : gids) {
      if (std::to_string(g["index"].get<int>()) == forced) return g;
    }
    return nullptr;
  }
  auto ipv4 = [](const json& g) { return g["gid"].get<std::string>().rfind("0000:0000:0000:0000:0000:ffff:", 0) == 0; };
  for (int pass = 0; pass < 3; ++pass) {
    for (const json& g : gids) {
      const bool v2 = g["type"].get<std::string>().find("v2") != std::string::npos;
      if ((pass == 0 && v2 && ipv4(g)) || (pass == 1 && v2) || pass == 2) return g;
    }
  }
  return nullptr;
}

json check_roce(const Input& in, Findings& findings) {
  json out = json::array();
  std::map<std::string, std::vector<std::string>> versions;  // RoCE version -> hosts
  for (const json& host : in.hosts) {
    const std::string forced = text_of(host["gid_index"]);
    for (const json& port : host["rdma"]) {
      if (port["link_layer"] != "Ethernet") continue;
      const std::string where = port["device"].get<std::string>() + " port " + std::to_string(port["port"].get<int>());
      const json pick = pick_gid(port["gids"], forced);
      bool has_v2 = false;
      for (const json& g : port["gids"]) has_v2 |= g["type"].get<std::string>().find("v2") != std::string::npos;
      out.push_back({{"host", host["host"]}, {"port", where}, {"gid", pick}, {"gid_index_setting", forced}});
      if (pick.is_null()) {
        findings.add(
            "problem", "roce", host["host"],
            where + ": " +
                (forced == "auto" ? "no GID in its table" : "RDMX_IB_GID_INDEX=" + forced + " is not in its GID table"),
            "pick an index from `rdmx info` (its RoCE v2 entry with an IPv4 address), or unset RDMX_IB_GID_INDEX");
        continue;
      }
      const std::string type = pick["type"];
      versions[type.find("v2") != std::string::npos ? "RoCE v2" : "RoCE v1"].push_back(host["host"]);
      if (type.find("v2") == std::string::npos && has_v2) {
        findings.add("warning", "roce", host["host"],
                     where + " uses GID " + std::to_string(pick["index"].get<int>()) + " (" + type +
                         "), which routers do not forward, although it has RoCE v2 entries",
                     "set RDMX_IB_GID_INDEX to the RoCE v2 entry with this host's IPv4 address (rdmx info lists them)");
      }
    }
  }
  if (versions.size() > 1) {
    std::string which;
    for (const auto& [version, names] : versions) {
      which += (which.empty() ? "" : "; ") + version + " on";
      for (const auto& n : names) which += " " + n;
    }
    findings.add("problem", "roce", "", "hosts address RoCE differently (" + which + "): their QPs cannot connect",
                 "set RDMX_IB_GID_INDEX on every host to its RoCE v2 entry with an IPv4 address");
  }
  return out;
}

json check_clock(const Input& in, Findings& findings) {
  json out = json::array();
  if (in.hosts.empty()) return out;
  for (std::size_t h = 1; h < in.hosts.size(); ++h) {
    const json* best = nullptr;
    for (const json& p : in.probes) {
      if (p["result"] != "ok" || p["from_host"] != 0 || p["to_host"] != static_cast<int>(h)) continue;
      if (best == nullptr || p["rtt_ms"].get<double>() < (*best)["rtt_ms"].get<double>()) best = &p;
    }
    if (best == nullptr) continue;
    const double offset = (*best)["offset_ms"], uncertainty = (*best)["rtt_ms"].get<double>() / 2;
    out.push_back({{"host", in.hosts[h]["host"]}, {"offset_ms", offset}, {"uncertainty_ms", uncertainty}});
    if (std::fabs(offset) - uncertainty > in.skew_ms) {
      findings.add("warning", "clock", in.hosts[h]["host"],
                   "its clock is " + fixed(std::fabs(offset), 1) + " ms " + (offset > 0 ? "ahead of " : "behind ") +
                       host_name(in.hosts, 0) +
                       "'s: rdmx status compares when ranks of different hosts entered "
                       "each collective, so stragglers and progress ages are off by that much",
                   "synchronise the clocks: run chrony or systemd-timesyncd on every host (timedatectl set-ntp true)");
    }
  }
  return out;
}

void check_gpu_nic(const Input& in, Findings& findings) {
  for (const json& host : in.hosts) {
    std::map<int, std::vector<std::string>> nics;  // NUMA node -> interfaces
    for (const json& e : host["interfaces"]) {
      if (e["numa_node"].get<int>() >= 0) nics[e["numa_node"]].push_back(e["name"]);
    }
    if (nics.empty()) continue;
    for (const json& gpu : host["gpus"]) {
      const int node = gpu["numa_node"];
      if (node < 0 || nics.count(node)) continue;
      std::string where;
      for (const auto& [n, names] : nics) {
        for (const auto& name : names) where += (where.empty() ? "" : ", ") + name + " on node " + std::to_string(n);
      }
      findings.add("warning", "gpu_nic", host["host"],
                   "GPU " + std::to_string(gpu["index"].get<int>()) + " (" + text_of(gpu["name"]) +
                       ") is on NUMA node " + std::to_string(node) + ", which has no NIC (" + where +
                       "): its traffic crosses the link between the CPU sockets",
                   "give this GPU's rank the nearest NIC (RDMX_IB_HCA, or RDMX_SOCKET_IFNAME) and run it on that "
                   "node's cores (numactl --cpunodebind), or move the NIC or GPU to one node");
    }
  }
}

}  // namespace

json analyse(const Input& in) {
  Findings findings;
  check_interfaces(in, findings);
  check_ports(in, findings);
  check_mtu(in, findings);
  json doc;
  doc["hosts"] = in.hosts;
  doc["probes"] = in.probes;
  doc["roce"] = check_roce(in, findings);
  doc["clock"] = check_clock(in, findings);
  check_gpu_nic(in, findings);
  doc["findings"] = findings.take();
  int problems = 0;
  for (const json& f : doc["findings"]) problems += f["severity"] == "problem";
  doc["problems"] = problems;
  return doc;
}

std::string describe(const json& doc) {
  std::string out;
  const json& hosts = doc["hosts"];
  for (const json& host : hosts) {
    const json& s = host["socket_interface"];
    out += "host " + host["host"].get<std::string>() + " (ranks";
    for (const json& r : host["ranks"]) out += " " + std::to_string(r.get<int>());
    out += "): ranks listen on " +
           (s["usable"].get<bool>() ? text_of(s["name"]) + " " + text_of(s["address"]) : std::string("nothing")) +
           ": " + text_of(s["why"]) + "\n";
    for (const json& e : host["interfaces"]) {
      out += "  " + e["name"].get<std::string>() + " " + e["address"].get<std::string>() + "/" +
             std::to_string(e["prefix"].get<int>()) + " mtu " + std::to_string(e["mtu"].get<int>());
      if (e["speed_mbps"].get<long>() > 0) out += " " + std::to_string(e["speed_mbps"].get<long>()) + " Mb/s";
      if (e["numa_node"].get<int>() >= 0) out += " numa " + std::to_string(e["numa_node"].get<int>());
      out += text_of(e["listen_error"]).empty() ? "" : " (no listener: " + text_of(e["listen_error"]) + ")";
      out += "\n";
    }
    for (const json& g : host["gpus"]) {
      out += "  GPU " + std::to_string(g["index"].get<int>()) + " " + text_of(g["name"]) +
             (g["numa_node"].get<int>() >= 0 ? " numa " + std::to_string(g["numa_node"].get<int>()) : "") + "\n";
    }
  }
  for (const json& host : hosts) {
    if (host["gpus"].empty())
      out += "GPUs on " + host["host"].get<std::string>() + ": none (" + text_of(host["gpu_note"]) + ")\n";
  }
  if (hosts.size() > 1) {
    out += "\nReachability (each address of a host to each of another's; from -> to: result)\n";
    for (const json& p : doc["probes"]) {
      out += "  " + host_name(hosts, p["from_host"]) + " " + p["from_interface"].get<std::string>() + " -> " +
             host_name(hosts, p["to_host"]) + " " + p["to_interface"].get<std::string>() + " " +
             p["to_address"].get<std::string>() + ":" + std::to_string(p["port"].get<int>()) + "  " +
             p["result"].get<std::string>();
      if (p["result"] == "ok") {
        out += " " + fixed(p["rtt_ms"], 2) + " ms";
      } else if (!text_of(p["detail"]).empty()) {
        out += " (" + text_of(p["detail"]) + ")";
      }
      out += "\n";
    }
  }
  for (const json& r : doc["roce"]) {
    out += "RoCE " + r["host"].get<std::string>() + " " + r["port"].get<std::string>() + ": " +
           (r["gid"].is_null() ? std::string("no usable GID")
                               : "GID " + std::to_string(r["gid"]["index"].get<int>()) + " " +
                                     r["gid"]["type"].get<std::string>() + " " + r["gid"]["gid"].get<std::string>()) +
           " (RDMX_IB_GID_INDEX=" + r["gid_index_setting"].get<std::string>() + ")\n";
  }
  for (const json& c : doc["clock"]) {
    out += "clock " + c["host"].get<std::string>() + ": " + fixed(c["offset_ms"], 2) + " ms from " +
           host_name(hosts, 0) + " (+/- " + fixed(c["uncertainty_ms"], 2) + " ms)\n";
  }
  out += "\nFindings\n";
  if (doc["findings"].empty()) out += "  none\n";
  for (const json& f : doc["findings"]) {
    const std::string where = text_of(f["host"]);
    out += "  [" + f["severity"].get<std::string>() + "] " + f["topic"].get<std::string>() + ": " +
           (where.empty() ? "" : where + ": ") + f["message"].get<std::string>() +
           "\n      fix: " + f["fix"].get<std::string>() + "\n";
  }
  const int problems = doc["problems"];
  out += problems == 0 ? "No problems found.\n" : std::to_string(problems) + " problem(s) found.\n";
  return out;
}

}  // namespace rdmx::cli::doctor
