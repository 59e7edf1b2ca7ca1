// SPDX-License-Identifier: MIT
// probe_providers() and settings(): what `rdmx info` reports about the
// library itself. Providers are probed by opening them exactly as an
// application would, so a reason printed here is the error it would get.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "coll/reduce.hpp"
#include "coll/settings.hpp"
#include "core/config.hpp"
#include "core/log.hpp"
#include "providers/shm/copy.hpp"
#include "providers/shm/shm_device.hpp"
#include "rdmx/error.hpp"
#include "rdmx/info.hpp"
#include "topo/topo.hpp"

extern char** environ;

namespace rdmx {
namespace {

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

ProviderStatus probe_built(const std::string& name) {
  ProviderStatus status{.name = name, .built = true};
  try {
    auto device = open_device(name);
    status.usable = true;
    status.device = device->name();
    status.caps = device->caps();
    status.reason = device->selection_reason();
    // open_device(name) records that a caller asked for it, which is true of
    // every probe and says nothing; what follows is the provider's own account.
    const std::string asked = "requested by the caller; ";
    if (status.reason.rfind(asked, 0) == 0) status.reason.erase(0, asked.size());
  } catch (const Error& e) {
    status.reason = e.message();
    if (!e.context().hint.empty()) status.reason += " (" + e.context().hint + ")";
  } catch (const std::exception& e) {
    status.reason = e.what();
  }
  return status;
}

ProviderStatus verbs_status() {
  ProviderStatus status{.name = "verbs"};
  status.reason = "not built: libibverbs (libibverbs-dev) was not found when rdmx was configured";
  const topo::RdmaScan rdma = topo::scan_rdma_devices();
  if (rdma.devices.empty()) {
    status.reason += "; and " + rdma.note;
    return status;
  }
  status.reason += "; RDMA devices present: ";
  for (std::size_t i = 0; i < rdma.devices.size(); ++i) {
    const auto& device = rdma.devices[i];
    status.reason += (i == 0 ? "" : ", ") + device.name;
    for (const auto& port : device.ports) {
      status.reason += " (port " + std::to_string(port.number) + " " + port.state + ", " + port.link_layer + ")";
    }
  }
  return status;
}

ProviderStatus cuda_status() {
  ProviderStatus status{.name = "cuda"};
  status.reason = "not built: the cuda provider is not written yet";
  const topo::GpuScan& gpus = topo::scan_gpus();
  if (gpus.gpus.empty()) {
    status.reason += "; and " + gpus.note;
    return status;
  }
  status.reason += "; GPUs present: ";
  for (std::size_t i = 0; i < gpus.gpus.size(); ++i) {
    status.reason += (i == 0 ? "" : ", ") + gpus.gpus[i].name + " (" + gpus.gpus[i].pci_bus_id + ")";
  }
  return status;
}

// Values in the units users write them in ("60s", "500ms", "4M"), so a value
// shown here can be pasted back into the environment.
std::string format_duration(std::chrono::milliseconds ms) {
  if (ms.count() % 1000 == 0) return std::to_string(ms.count() / 1000) + "s";
  return std::to_string(ms.count()) + "ms";
}

std::string format_size(std::size_t bytes) {
  if (bytes != 0 && bytes % (1u << 30) == 0) return std::to_string(bytes >> 30) + "G";
  if (bytes != 0 && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + "M";
  if (bytes != 0 && bytes % (1u << 10) == 0) return std::to_string(bytes >> 10) + "K";
  return std::to_string(bytes);
}

const char* level_name(core::LogLevel level) {
  switch (level) {
    case core::LogLevel::None: return "NONE";
    case core::LogLevel::Warn: return "WARN";
    case core::LogLevel::Info: return "INFO";
    case core::LogLevel::Trace: return "TRACE";
  }
  return "?";
}

// The library falls back to the default (with a warning) on a malformed
// value; the report shows the value in force and what was ignored.
Setting make(const char* name, std::string in_force, std::string meaning, bool valid = true) {
  Setting s{.name = name, .value = std::move(in_force), .meaning = std::move(meaning)};
  if (auto text = core::env(name)) {
    s.from_env = true;
    if (!valid) s.value += " (ignored \"" + *text + "\": malformed)";
  }
  return s;
}

Setting text_setting(const char* name, const std::string& fallback, std::string meaning) {
  return make(name, core::env(name).value_or(fallback), std::move(meaning));
}

// The library refuses a bad duration (core/config.hpp) rather than ignoring
// it, so the report shows the value as refused and the library's reason.
template <typename Read, typename Format>
Setting refusable_setting(const char* name, Read read, Format format, std::string meaning) {
  try {
    return make(name, format(read()), std::move(meaning));
  } catch (const Error& e) {
    Setting s{.name = name, .value = core::env(name).value_or("") + " (refused)", .from_env = true};
    s.meaning = "refused: " + e.message() + " (" + e.context().hint + ")";
    return s;
  }
}

Setting duration_setting(const char* name, std::chrono::milliseconds (*read)(), std::string meaning) {
  return refusable_setting(name, read, format_duration, std::move(meaning));
}

Setting size_setting(const char* name, std::size_t in_force, std::string meaning) {
  auto text = core::env(name);
  return make(name, format_size(in_force), std::move(meaning), !text || core::parse_size(*text));
}

Setting debug_setting() {
  const char* level = level_name(core::log_level());
  bool valid = true;
  if (auto text = core::env("RDMX_DEBUG")) {
    std::string upper = *text;
    for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    valid = upper == "WARN" || upper == "INFO" || upper == "TRACE" || upper == "NONE" || upper == "OFF";
  }
  return make("RDMX_DEBUG", level, "log level: WARN (warnings only), INFO, TRACE or NONE", valid);
}

}  // namespace

std::vector<ProviderStatus> probe_providers() {
  std::vector<ProviderStatus> statuses;
  const std::vector<std::string> built = available_providers();
  for (const auto& name : built) statuses.push_back(probe_built(name));
  if (!contains(built, "verbs")) statuses.push_back(verbs_status());
  if (!contains(built, "cuda")) statuses.push_back(cuda_status());
  return statuses;
}

std::chrono::milliseconds default_timeout() { return core::timeout(); }

std::vector<Setting> settings() {
  const coll::CollSettings coll_values = coll::coll_settings();
  const auto cache_text = core::env("RDMX_REGISTRATION_CACHE");
  const bool cache_valid = !cache_text || *cache_text == "0" || *cache_text == "1";
  std::vector<Setting> list = {
      debug_setting(),
      text_setting("RDMX_DEBUG_FILE", "stderr", "log to this file instead of stderr (%h: host name, %p: pid)"),
      text_setting("RDMX_PROVIDER", "auto",
                   "the provider open_device(\"auto\") opens (shm, verbs, tcp); auto picks per peer: shm on this "
                   "host, else verbs where both sides have an RDMA port, else tcp"),
      duration_setting("RDMX_TIMEOUT", core::read_timeout,
                       "bound on every blocking wait (store, CQ wait, connection): 30, 2.5s or 500ms; at most 30 "
                       "days"),
      duration_setting("RDMX_RNR_TIMEOUT", core::read_rnr_timeout,
                       "how long a SEND waits for the peer to post a receive before RNR_RETRY_EXC_ERR"),
      refusable_setting("RDMX_SPIN_US", core::read_spin_budget,
                        [](std::chrono::microseconds us) { return std::to_string(us.count()); },
                        "how long a waiter busy-polls before it sleeps, in microseconds (at most 1000000)"),
      text_setting("RDMX_SOCKET_IFNAME", "auto",
                   "tcp: interfaces to use (name prefixes, ^ excludes, = exact); auto: the first up that is "
                   "neither loopback nor docker*, else loopback"),
      text_setting("RDMX_SOCKET_FAMILY", "any", "tcp: AF_INET or AF_INET6 (any: IPv4 preferred)"),
      text_setting("RDMX_SHM_DIR", "/tmp/rdmx-shm-" + std::to_string(::getuid()),
                   "shm: the directory of the devices' sockets"),
      size_setting("RDMX_SHM_EAGER_LIMIT", shm::eager_limit(),
                   "shm: largest message copied through the rings (at most 64K)"),
      size_setting("RDMX_SHM_NT_THRESHOLD", shm::nt_threshold(),
                   "shm: direct copies at least this large use non-temporal stores"),
      size_setting("RDMX_SHM_SPLIT_THRESHOLD", shm::split_threshold(),
                   "shm: direct copies at least this large are split over two threads"),
      size_setting("RDMX_SHM_COPY_THREADS", shm::copy_threads(),
                   "shm: 0 disables the copy helper thread"),
      make("RDMX_REGISTRATION_CACHE", core::registration_cache_enabled() ? "1" : "0",
           "1: collectives keep registrations of user buffers between operations (on verbs while unmaps are "
           "seen: rdmx info's registration cache line); 0: register them for each operation",
           cache_valid),
      text_setting("RDMX_IB_HCA", "auto",
                   "verbs: devices[:port] to use, as NCCL_IB_HCA (prefixes; = exact names; ^ excludes); auto: the "
                   "first device with an active port"),
      text_setting("RDMX_IB_GID_INDEX", "auto",
                   "verbs: RoCE GID table index; auto: RoCE v2 with an IPv4 address, else RoCE v2, else v1"),
      text_setting("RDMX_ALGO", "auto",
                   "force collective algorithms: ring, or per operation all_reduce:rd,broadcast:tree (auto: by "
                   "size and rank count)"),
      size_setting("RDMX_COLL_BUFFSIZE", coll_values.buffsize,
                   "collectives: inbox bytes per peer (every rank must agree)"),
      size_setting("RDMX_COLL_SLOTS", coll_values.slots,
                   "collectives: inbox slots per peer (every rank must agree)"),
      size_setting("RDMX_COLL_STAGE_LIMIT", coll_values.stage_limit,
                   "collectives: payloads up to this size are copied, larger ones written in place"),
      size_setting("RDMX_COLL_DIRECT_MIN", coll_values.direct_min,
                   "collectives: transfers from this size on go straight into the receiver's buffer (0: off)"),
      make("RDMX_REDUCE_ISA", coll::reduce_isa(),
           "cap the reduction kernels at scalar, avx2 or avx512 (default: the best this CPU has)"),
      text_setting("RDMX_RANK", "unset", "this process's rank (bootstrap, rdmx launcher)"),
      text_setting("RDMX_WORLD_SIZE", "unset", "the number of ranks (bootstrap, rdmx launcher)"),
      text_setting("RDMX_LOCAL_RANK", "unset", "this process's rank among those on its host"),
      text_setting("RDMX_LOCAL_WORLD_SIZE", "unset", "the number of ranks on this host"),
      text_setting("RDMX_STORE", "unset",
                   "the job's store: host:port (rank 0 serves it when local) or file:/shared/dir; unset: "
                   "MASTER_ADDR/MASTER_PORT"),
  };
  std::vector<Setting> unknown;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr || std::strncmp(*e, "RDMX_", 5) != 0) continue;
    const std::string name(*e, static_cast<std::size_t>(eq - *e));
    if (std::any_of(list.begin(), list.end(), [&](const Setting& s) { return s.name == name; })) continue;
    unknown.push_back({.name = name, .value = eq + 1, .from_env = true,
                       .meaning = "not a known setting: the library does not read it (a typo?)"});
  }
  std::sort(unknown.begin(), unknown.end(), [](const Setting& a, const Setting& b) { return a.name < b.name; });
  list.insert(list.end(), unknown.begin(), unknown.end());
  return list;
}

}  // namespace rdmx
