// SPDX-License-Identifier: MIT
// probe_auto() and info_json(): the `rdmx info --json` document, in the
// library so the command and the Python package give the same one. Field
// names are the C++ ones (rdmx/info.hpp), documented in
// docs/schemas/info.schema.json; ordered as the text report, not alphabetically.
#include <exception>
#include <nlohmann/json.hpp>

#include "rdmx/error.hpp"
#include "rdmx/info.hpp"
#include "rdmx/registration_cache.hpp"

namespace rdmx {

AutoChoice probe_auto() {
  AutoChoice choice;
  try {
    auto device = open_device("auto");
    choice.usable = true;
    choice.provider = device->provider();
    choice.device = device->name();
    choice.reason = device->selection_reason();
  } catch (const std::exception& e) {
    choice.reason = e.what();
  }
  return choice;
}

namespace {

using Json = nlohmann::ordered_json;

Json caps_json(const DeviceCaps& caps) {
  return {{"remote_peers", caps.remote_peers},
          {"same_host_peers", caps.same_host_peers},
          {"auto_progress", caps.auto_progress},
          {"ordered_write_placement", caps.ordered_write_placement},
          {"registration_pins_memory", caps.registration_pins_memory},
          {"writes_wake_waiters", caps.writes_wake_waiters},
          {"direct_registered_writes", caps.direct_registered_writes},
          {"max_msg_size", caps.max_msg_size},
          {"max_qp_wr", caps.max_qp_wr},
          {"max_sge", caps.max_sge},
          {"max_inline_data", caps.max_inline_data},
          {"cuda_memory", to_string(caps.cuda_memory)}};
}

Json null_if_empty(const std::string& text) { return text.empty() ? Json() : Json(text); }

Json providers_json(const std::vector<ProviderStatus>& providers) {
  Json out = Json::array();
  for (const auto& p : providers) {
    out.push_back({{"name", p.name},
                   {"built", p.built},
                   {"usable", p.usable},
                   {"reason", p.reason},
                   {"device", p.usable ? Json(p.device) : Json()},
                   {"caps", p.usable ? caps_json(p.caps) : Json()}});
  }
  return out;
}

Json rdma_json(const std::vector<RdmaDevice>& devices) {
  Json out = Json::array();
  for (const auto& device : devices) {
    Json ports = Json::array();
    for (const auto& port : device.ports) {
      Json gids = Json::array();
      for (const auto& gid : port.gids) {
        gids.push_back({{"index", gid.index}, {"gid", gid.gid}, {"type", gid.type}, {"netdev", gid.netdev}});
      }
      ports.push_back({{"number", port.number},
                       {"state", port.state},
                       {"link_layer", port.link_layer},
                       {"rate", port.rate},
                       {"lid", port.lid},
                       {"gids", gids}});
    }
    out.push_back({{"name", device.name}, {"node_guid", device.node_guid}, {"ports", ports}});
  }
  return out;
}

}  // namespace

std::string info_json(int indent) {
  const HostTopology host = discover_topology();
  const AutoChoice chosen = probe_auto();
  const UnmapDetection cache = unmap_detection();

  Json doc;
  doc["schema"] = "rdmx.info/1";
  doc["hostname"] = host.hostname;
  doc["providers"] = providers_json(probe_providers());
  doc["auto"] = {{"usable", chosen.usable},
                 {"provider", null_if_empty(chosen.provider)},
                 {"device", null_if_empty(chosen.device)},
                 {"reason", chosen.reason}};
  doc["registration_cache"] = {{"unmap_detection", cache.available}, {"how", cache.how}};
  const AuthStatus auth = probe_auth();
  doc["authentication"] = {{"authenticated", auth.authenticated}, {"how", auth.how}};
  const SocketInterfaceChoice socket = socket_interface();
  auto skipped = Json::array();
  for (const auto& s : socket.skipped)
    skipped.push_back({{"name", s.name}, {"address", s.address}, {"reason", s.reason}});
  doc["socket_interface"] = {{"usable", socket.usable},
                             {"name", null_if_empty(socket.name)},
                             {"address", null_if_empty(socket.address)},
                             {"why", socket.why},
                             {"skipped", skipped}};
  try {
    doc["listen_ports"] = listen_ports().text;
  } catch (const Error& e) {
    doc["listen_ports"] = e.what();
  }
  doc["rdma_devices"] = rdma_json(host.rdma_devices);
  doc["rdma_note"] = host.rdma_note;

  auto& interfaces = doc["interfaces"] = Json::array();
  for (const auto& iface : host.interfaces) {
    interfaces.push_back({{"name", iface.name},
                          {"addresses", iface.addresses},
                          {"up", iface.up},
                          {"loopback", iface.loopback},
                          {"mtu", iface.mtu},
                          {"speed_mbps", iface.speed_mbps},
                          {"numa_node", iface.numa_node}});
  }

  doc["cores"] = host.cores;
  doc["logical_cpus"] = host.logical_cpus;
  auto& nodes = doc["numa_nodes"] = Json::array();
  for (const auto& node : host.numa_nodes) {
    nodes.push_back({{"index", node.index}, {"cpus", node.cpus}, {"memory_bytes", node.memory_bytes}});
  }
  doc["cpu_note"] = host.cpu_note;

  auto& gpus = doc["gpus"] = Json::array();
  for (const auto& gpu : host.gpus) {
    gpus.push_back({{"index", gpu.index},
                    {"name", gpu.name},
                    {"pci_bus_id", gpu.pci_bus_id},
                    {"numa_node", gpu.numa_node},
                    {"memory_bytes", gpu.memory_bytes},
                    {"virtual_memory", gpu.virtual_memory},
                    {"fd_export", gpu.fd_export},
                    {"dma_buf", gpu.dma_buf},
                    {"gpudirect_rdma", gpu.gpudirect_rdma}});
  }
  doc["gpu_note"] = host.gpu_note;
  const CudaStatus cuda = probe_cuda();
  doc["cuda"] = {{"usable", cuda.usable},
                 {"reason", cuda.reason},
                 {"driver_version", cuda.driver_version},
                 {"kernels", cuda.kernels},
                 {"kernels_note", cuda.kernels_note}};

  auto& settings_doc = doc["settings"] = Json::array();
  for (const auto& s : settings()) {
    settings_doc.push_back({{"name", s.name},
                            {"value", s.value},
                            {"default", s.default_value},
                            {"from_env", s.from_env},
                            {"meaning", s.meaning}});
  }
  return doc.dump(indent);
}

}  // namespace rdmx
