// SPDX-License-Identifier: MIT
#include "plan/fabric.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "plan/doc_fields.hpp"
#include "rdmx/error.hpp"

// tools/rdmx/plan/data/fabrics.json, compiled in by tools/CMakeLists.txt.
extern const char rdmx_plan_builtin_fabrics[];

namespace rdmx::cli::plan {

double Fabric::node_net_bytes_per_s() const {
  double per_node = nics_per_node * nic_gbit * efficiency * 1e9 / 8;
  // Without GPUDirect every byte crosses host memory on the way; NCCL and
  // rdmx pipeline the copies, so the slower of the two paths sets the pace.
  if (!gpudirect) per_node = std::min(per_node, staging_gb_s * 1e9);
  return per_node;
}

// Published NCCL socket runs with eight GPUs behind one NIC reach about
// half of what the same hosts reach with one GPU per NIC: every GPU's proxy
// threads and sockets contend for the host's cores and the one link. With
// four GPUs per NIC the published runs lost nothing measurable to RDMA's
// advantage beyond the link. docs/ADVISOR.md, "Sockets by GPUs per NIC",
// cites both.
constexpr double kSocketShareAtEightPerNic = 0.53;

double Fabric::socket_share(int ranks_per_node) const {
  const double per_nic = static_cast<double>(ranks_per_node) / std::max(1, nics_per_node);
  if (transport != "socket" || per_nic <= 4) return 1;
  if (per_nic >= 8) return kSocketShareAtEightPerNic;
  // Between the two, in proportion to log2 of the GPUs per NIC.
  return 1 - (1 - kSocketShareAtEightPerNic) * (std::log2(per_nic) - 2);
}

namespace {

std::string one_of(const nlohmann::json& f, const DocPlace& place, const std::string& field,
                   const std::vector<std::string>& allowed, const std::string& fallback) {
  const std::string value = text_field_or(f, place, field, fallback);
  std::string list;
  for (const auto& a : allowed) {
    if (value == a) return value;
    list += (list.empty() ? "" : ", ") + a;
  }
  bad_field(place, field, "must be one of " + list + ", not \"" + value + "\"");
}

}  // namespace

std::vector<Fabric> parse_fabrics(const nlohmann::json& doc, const std::string& origin) {
  if (!doc.is_object() || !doc.contains("fabrics") || !doc["fabrics"].is_object()) {
    throw Error(ErrorCode::InvalidArgument, origin + ": expected an object with a \"fabrics\" object",
                {.op = "rdmx plan", .hint = "start from `rdmx plan fabrics --json`, which prints the built-in file"});
  }
  std::vector<Fabric> out;
  for (const auto& [name, f] : doc["fabrics"].items()) {
    const DocPlace place{origin, "fabric " + name};
    if (!f.is_object()) bad_field(place, "(the fabric)", "must be an object");
    Fabric fab;
    fab.name = name;
    fab.description = text_field_or(f, place, "description", name);
    fab.latency_us = number_field(f, place, "latency_us", 0, 1e6);
    fab.nic_gbit = number_field(f, place, "nic_gbit", 1e-3, 1e5);
    fab.efficiency = number_field(f, place, "efficiency", 0.01, 1);
    fab.nics_per_node = static_cast<int>(number_field(f, place, "nics_per_node", 1, 64));
    fab.gpudirect = bool_field(f, place, "gpudirect");
    fab.staging_gb_s = number_field(f, place, "staging_gb_s", 1e-3, 1e5);
    fab.intra_latency_us = number_field(f, place, "intra_latency_us", 0, 1e6);
    fab.intra_gb_s = number_field(f, place, "intra_gb_s", 1e-3, 1e5);
    fab.reduce_gb_s = number_field(f, place, "reduce_gb_s", 1e-3, 1e6);
    fab.relative_cost = number_field_or(f, place, "relative_cost", 0, 1e9, 0);
    fab.gpu = text_field_or(f, place, "gpu", fab.gpu);
    fab.intra_link = one_of(f, place, "intra_link", {"nvlink", "pci"}, fab.intra_link);
    fab.transport = one_of(f, place, "transport", {"rdma", "socket"}, fab.transport);
    fab.nccl_channels = static_cast<int>(number_field_or(f, place, "nccl_channels", 0, 64, 0));
    if (f.contains("sources")) {
      if (!f["sources"].is_object()) bad_field(place, "sources", "must be an object of field: source text");
      for (const auto& [field, source] : f["sources"].items()) {
        if (!source.is_string()) bad_field(place, "sources." + field, "must be a string");
        fab.sources[field] = source.get<std::string>();
      }
    }
    out.push_back(std::move(fab));
  }
  if (out.empty()) {
    throw Error(ErrorCode::InvalidArgument, origin + ": no fabric in \"fabrics\"", {.op = "rdmx plan"});
  }
  return out;
}

nlohmann::json fabric_to_json(const Fabric& f) {
  nlohmann::json j = {{"description", f.description},     {"latency_us", f.latency_us},
                      {"nic_gbit", f.nic_gbit},           {"efficiency", f.efficiency},
                      {"nics_per_node", f.nics_per_node}, {"gpudirect", f.gpudirect},
                      {"staging_gb_s", f.staging_gb_s},   {"intra_latency_us", f.intra_latency_us},
                      {"intra_gb_s", f.intra_gb_s},       {"reduce_gb_s", f.reduce_gb_s},
                      {"relative_cost", f.relative_cost}, {"gpu", f.gpu},
                      {"intra_link", f.intra_link},       {"transport", f.transport},
                      {"nccl_channels", f.nccl_channels}};
  if (!f.sources.empty()) j["sources"] = f.sources;
  return j;
}

const std::string& builtin_fabrics_text() {
  static const std::string text(rdmx_plan_builtin_fabrics);
  return text;
}

std::vector<Fabric> load_fabrics(const std::string& path) {
  if (path.empty()) return parse_fabrics(nlohmann::json::parse(builtin_fabrics_text()), "built-in fabrics");
  return parse_fabrics(read_json_file(path, "fabric profile"), path);
}

std::string fabric_label(const Fabric& f) {
  char links[64];
  std::snprintf(links, sizeof links, " (%dx%gG)", f.nics_per_node, f.nic_gbit);
  return f.name + links;
}

Fabric on_links(const Fabric& f, int nics, double nic_gbit, const std::string& why) {
  if (f.nics_per_node == nics && f.nic_gbit == nic_gbit) return f;
  Fabric out = f;
  out.nics_per_node = nics;
  out.nic_gbit = nic_gbit;
  char links[96];
  std::snprintf(links, sizeof links, "%d x %g Gbit/s per node", nics, nic_gbit);
  out.description = f.description + "; here on " + links + " (" + why + ")";
  out.sources["nics_per_node"] = std::string(links) + ": " + why;
  out.sources["nic_gbit"] = out.sources["nics_per_node"];
  // The built-in relative costs rank transports, not capacities: scaled by
  // capacity, eight 400G InfiniBand ports would come out cheaper per Gbit/s
  // than one 100G Ethernet port. Kept, they still order the transports.
  out.sources["relative_cost"] = "the profile's for its own links, kept: it ranks the transport (" + why + ")";
  return out;
}

const Fabric& find_fabric(const std::vector<Fabric>& fabrics, const std::string& name) {
  std::string known;
  for (const auto& f : fabrics) {
    if (f.name == name) return f;
    known += (known.empty() ? "" : ", ") + f.name;
  }
  throw Error(
      ErrorCode::NotFound, "no fabric named '" + name + "'",
      {.op = "rdmx plan", .hint = "known: " + known + " (rdmx plan fabrics lists them; --fabric-file adds yours)"});
}

}  // namespace rdmx::cli::plan
