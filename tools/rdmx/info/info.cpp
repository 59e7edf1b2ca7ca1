// SPDX-License-Identifier: MIT
// rdmx info: what this host has and what rdmx would pick, as a readable
// report or (--json) the library's info_json() document.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "launch/local_job.hpp"
#include "rdmx/comm.hpp"
#include "rdmx/error.hpp"
#include "rdmx/info.hpp"
#include "rdmx/registration_cache.hpp"
#include "rdmx/verbs.hpp"

namespace rdmx::cli {
namespace {

struct InfoOptions {
  bool json = false;
  bool settings_markdown = false;
  bool communicator = false;
  int np = 0;  // 0: default_local_ranks()
};

struct Report {
  HostTopology host;
  std::vector<ProviderStatus> providers;
  AutoChoice chosen;
  std::vector<Setting> settings;
  UnmapDetection registration_cache;
  AuthStatus auth;
  SocketInterfaceChoice socket;
  std::string ports;
  CudaStatus cuda;
};

// ---------------------------------------------------------------------------
// Text

std::string size_text(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  if (unit == 0 || value == static_cast<double>(static_cast<std::uint64_t>(value))) {
    std::snprintf(text, sizeof text, "%.0f %s", value, units[unit]);
  } else {
    std::snprintf(text, sizeof text, "%.1f %s", value, units[unit]);
  }
  return text;
}

// "0-3,8-11": how lscpu and taskset write CPU lists.
std::string cpu_ranges(const std::vector<int>& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out.empty() ? "none" : out;
}

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

std::string caps_text(const DeviceCaps& caps) {
  std::vector<std::string> flags;
  if (caps.remote_peers) flags.emplace_back("remote peers");
  if (caps.same_host_peers) flags.emplace_back("same-host peers");
  if (caps.auto_progress) flags.emplace_back("auto progress");
  if (caps.ordered_write_placement) flags.emplace_back("ordered write placement");
  if (caps.registration_pins_memory) flags.emplace_back("registration pins memory");
  if (caps.writes_wake_waiters) flags.emplace_back("writes wake waiters");
  if (caps.direct_registered_writes) flags.emplace_back("direct writes into registered memory");
  return join(flags, ", ") + "; max message " + size_text(caps.max_msg_size) + ", " + std::to_string(caps.max_qp_wr) +
         " WRs per QP, " + std::to_string(caps.max_sge) + " SGEs, " + std::to_string(caps.max_inline_data) +
         " B inline; CUDA memory: " + to_string(caps.cuda_memory);
}

std::size_t widest(const auto& items, auto field) {
  std::size_t width = 0;
  for (const auto& item : items) width = std::max(width, std::string(field(item)).size());
  return width;
}

void print_providers(const Report& report) {
  std::printf("Providers (in auto selection's order)\n");
  const std::size_t width = std::max<std::size_t>(widest(report.providers, [](const auto& p) { return p.name; }), 5);
  const std::string indent(2 + width + 2, ' ');
  for (const auto& p : report.providers) {
    if (p.usable) {
      std::printf("  %-*s  usable      %s\n", static_cast<int>(width), p.name.c_str(), p.device.c_str());
      std::printf("%swhy: %s\n", indent.c_str(), p.reason.c_str());
      std::printf("%scaps: %s\n", indent.c_str(), caps_text(p.caps).c_str());
    } else {
      std::printf("  %-*s  not usable  %s\n", static_cast<int>(width), p.name.c_str(), p.reason.c_str());
    }
  }
  if (report.chosen.usable) {
    std::printf("  %-*s  opens       %s\n", static_cast<int>(width), "auto", report.chosen.device.c_str());
    std::printf("%swhy: %s\n", indent.c_str(), report.chosen.reason.c_str());
  } else {
    std::printf("  %-*s  fails       %s\n", static_cast<int>(width), "auto", report.chosen.reason.c_str());
  }
  // Where registration pins memory, collectives keep user-buffer
  // registrations between operations only where unmaps can be seen.
  std::printf("\nRegistration cache (user buffers of collectives, RegistrationCache)\n");
  const std::string line =
      report.registration_cache.available
          ? "kept between operations; unmaps seen through " + report.registration_cache.how
          : "pinning registrations last one operation; unmap watching " + report.registration_cache.how;
  std::printf("  %s\n", line.c_str());
  std::printf("\nConnections\n  %s\n", report.auth.how.c_str());
  const SocketInterfaceChoice& socket = report.socket;
  if (socket.usable) {
    std::printf("  sockets listen on %s (%s): %s\n", socket.name.c_str(), socket.address.c_str(), socket.why.c_str());
  } else {
    std::printf("  sockets: no interface fits: %s\n", socket.why.c_str());
  }
  std::printf("  listener ports (RDMX_PORT_RANGE): %s\n", report.ports.c_str());
}

void print_rdma(const HostTopology& host) {
  std::printf("\nRDMA devices\n");
  if (host.rdma_devices.empty()) std::printf("  none: %s\n", host.rdma_note.c_str());
  for (const auto& device : host.rdma_devices) {
    std::printf("  %s  node GUID %s\n", device.name.c_str(), device.node_guid.c_str());
    for (const auto& port : device.ports) {
      std::printf("    port %d: %s, %s, %s, LID %d\n", port.number, port.state.c_str(), port.link_layer.c_str(),
                  port.rate.c_str(), port.lid);
      for (const auto& gid : port.gids) {
        std::printf("      GID %-3d %s  %s%s%s\n", gid.index, gid.gid.c_str(), gid.type.c_str(),
                    gid.netdev.empty() ? "" : "  ", gid.netdev.c_str());
      }
    }
  }
}

void print_interfaces(const HostTopology& host) {
  std::printf("\nNetwork interfaces\n");
  if (host.interfaces.empty()) std::printf("  none (getifaddrs listed nothing)\n");
  const std::size_t width = widest(host.interfaces, [](const auto& i) { return i.name; });
  for (const auto& iface : host.interfaces) {
    std::string state = iface.up ? "up" : "down";
    if (iface.loopback) state += ", loopback";
    std::string facts = "MTU " + std::to_string(iface.mtu);
    facts += iface.speed_mbps > 0 ? ", " + std::to_string(iface.speed_mbps) + " Mb/s" : ", speed unknown";
    facts += iface.numa_node >= 0 ? ", NUMA node " + std::to_string(iface.numa_node) : "";
    std::printf("  %-*s  %-14s  %s\n", static_cast<int>(width), iface.name.c_str(), state.c_str(), facts.c_str());
    if (!iface.addresses.empty()) {
      std::printf("  %-*s  %s\n", static_cast<int>(width), "", join(iface.addresses, ", ").c_str());
    }
  }
}

void print_cpus(const HostTopology& host) {
  std::printf("\nCPUs and NUMA\n");
  if (!host.cpu_note.empty()) std::printf("  unknown: %s\n", host.cpu_note.c_str());
  std::printf("  %d cores, %d logical CPUs, %zu NUMA node%s\n", host.cores, host.logical_cpus, host.numa_nodes.size(),
              host.numa_nodes.size() == 1 ? "" : "s");
  for (const auto& node : host.numa_nodes) {
    std::printf("  node %d: CPUs %s, %s\n", node.index, cpu_ranges(node.cpus).c_str(),
                size_text(node.memory_bytes).c_str());
  }
}

void print_gpus(const HostTopology& host, const CudaStatus& cuda) {
  std::printf("\nGPUs\n");
  if (host.gpus.empty()) std::printf("  none: %s\n", host.gpu_note.c_str());
  for (const auto& gpu : host.gpus) {
    std::printf("  %d  %s  %s  %s\n", gpu.index, gpu.name.c_str(), gpu.pci_bus_id.c_str(),
                size_text(gpu.memory_bytes).c_str());
    auto yes_no = [](bool on) { return on ? "yes" : "no"; };
    std::printf("     VMM %s, fd export %s, dma-buf %s, GPUDirect RDMA %s\n", yes_no(gpu.virtual_memory),
                yes_no(gpu.fd_export), yes_no(gpu.dma_buf), yes_no(gpu.gpudirect_rdma));
  }
  // How each provider serves device memory is on its caps line above.
  std::printf("  CUDA memory        %s: %s\n", cuda.usable ? "on" : "off", cuda.reason.c_str());
  std::printf("  reduction kernels  %s\n", cuda.kernels_note.c_str());
}

void print_settings(const std::vector<Setting>& settings) {
  std::printf("\nSettings (RDMX_* environment variables)\n");
  const std::size_t name_width = widest(settings, [](const auto& s) { return s.name; });
  const std::size_t value_width = std::min<std::size_t>(widest(settings, [](const auto& s) { return s.value; }), 20);
  for (const auto& s : settings) {
    std::printf("  %-*s = %-*s  %-9s  %s\n", static_cast<int>(name_width), s.name.c_str(),
                static_cast<int>(value_width), s.value.c_str(), s.from_env ? "(set)" : "(default)", s.meaning.c_str());
  }
}

// The README's table of settings, from the same registry (a test compares the two).
void print_settings_markdown() {
  auto cell = [](const std::string& text) {
    std::string out;
    for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
    return out;
  };
  std::printf("| Variable | Default | Meaning |\n|---|---|---|\n");
  for (const auto& s : settings()) {
    if (s.default_value.empty()) continue;  // a variable the library does not read
    std::printf("| `%s` | `%s` | %s |\n", s.name.c_str(), cell(s.default_value).c_str(), cell(s.meaning).c_str());
  }
}

void print_text(const Report& report) {
  const HostTopology& host = report.host;
  std::printf("rdmx info: host %s\n\n", host.hostname.c_str());
  print_providers(report);
  print_rdma(host);
  print_interfaces(host);
  print_cpus(host);
  print_gpus(host, report.cuda);
  print_settings(report.settings);
}

// What a communicator over this job's ranks builds: its topology, and the
// algorithm each operation takes at a few sizes (rank 0 prints it).
void print_communicator() {
  const std::unique_ptr<Communicator> comm = Communicator::from_env();
  if (comm->rank() == 0) {
    std::printf("rdmx info: communicator of %d ranks\n\n%s\n\nAlgorithms (RDMX_ALGO overrides):\n", comm->size(),
                comm->describe_topology().c_str());
    const CollOp ops[] = {CollOp::AllReduce, CollOp::AllGather, CollOp::ReduceScatter, CollOp::Broadcast,
                          CollOp::Reduce};
    const std::size_t sizes[] = {4, 64 << 10, 1 << 20, 64 << 20};
    for (CollOp op : ops) {
      for (std::size_t bytes : sizes) {
        std::printf("  %-15s %9s  %s\n", to_string(op), size_text(bytes).c_str(),
                    comm->explain_algorithm(op, bytes).c_str());
      }
    }
  }
  comm->barrier();
}

void run_info(const InfoOptions& options) {
  if (options.communicator) {
    if (run_self_as_local_ranks(options.np > 0 ? options.np : default_local_ranks(), "rdmx info")) return;
    print_communicator();
    return;
  }
  if (options.json) {
    std::printf("%s\n", info_json().c_str());
    return;
  }
  if (options.settings_markdown) {
    print_settings_markdown();
    return;
  }
  Report report;
  report.host = discover_topology();
  report.providers = probe_providers();
  report.chosen = probe_auto();
  report.settings = settings();
  report.registration_cache = unmap_detection();
  report.auth = probe_auth();
  report.socket = socket_interface();
  try {
    report.ports = listen_ports().text;
  } catch (const Error& e) {
    report.ports = e.what();
  }
  report.cuda = probe_cuda();
  print_text(report);
}

}  // namespace

void register_info(CLI::App& root) {
  auto options = std::make_shared<InfoOptions>();
  CLI::App* info = root.add_subcommand(
      "info",
      "Providers and why each is or is not usable; RDMA devices, interfaces, CPUs/NUMA, GPUs and CUDA memory; "
      "settings in force");
  info->add_flag("--json", options->json, "Print one JSON document (docs/schemas/info.schema.json)");
  info->add_flag("--settings-markdown", options->settings_markdown,
                 "Print the table of settings (name, default, meaning) as the README has it");
  info->add_flag("--communicator", options->communicator,
                 "Join a communicator of this job's ranks (a launcher's, or --np local ones) and print the "
                 "topology it built (hosts, rings and trees) and each operation's algorithm by size");
  info->add_option("--np", options->np, "local ranks to start for --communicator when no launcher started this")
      ->check(CLI::Range(1, 65536));
  info->callback([options] { run_info(*options); });
}

}  // namespace rdmx::cli
