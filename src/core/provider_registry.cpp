// SPDX-License-Identifier: MIT
// open_device(): maps provider names to factories and explains the choice.
#include <algorithm>
#include <functional>

#include "core/config.hpp"
#include "core/log.hpp"
#include "core/settings.hpp"
#include "providers/auto/auto_device.hpp"
#include "providers/shm/address.hpp"
#include "providers/shm/shm_factory.hpp"
#include "providers/tcp/tcp_factory.hpp"
#if RDMX_HAVE_VERBS
#include "providers/verbs/verbs_factory.hpp"
#endif
#include "rdmx/verbs.hpp"

namespace rdmx {
namespace {

constexpr core::TextSetting kProvider{
    "RDMX_PROVIDER", "auto",
    "the provider open_device(\"auto\") opens (shm, verbs, tcp); auto picks per peer: shm on this host, else verbs "
    "where both sides have an RDMA port, else tcp"};
RDMX_SETTING(kProvider);

struct ProviderEntry {
  const char* name;
  // Opens a device over `resources`; `why` is the reason it was chosen, for selection_reason().
  std::function<std::shared_ptr<Device>(const std::string& why, core::DeviceResources resources)> open;
  // For auto selection: whether a QP address is this provider's, and whether it can reach it.
  std::function<bool(const QpAddress&)> owns;
  std::function<bool(const Device&, const QpAddress&, std::string*)> reaches;
  // Auto selection goes on without a provider that cannot open here (no
  // hardware), saying why; the others must open.
  bool optional = false;
  // Removes what processes that died without closing their devices left on this host; returns how many.
  std::size_t (*remove_stale)() = nullptr;
};

// In auto selection's order: the first that reaches a peer carries its QPs.
const std::vector<ProviderEntry>& providers() {
  static const std::vector<ProviderEntry> kProviders = {
    {"shm", [](const std::string& why, core::DeviceResources r) { return shm::open_shm_device(why, std::move(r)); },
     [](const QpAddress& a) { return shm::ShmAddress::is_shm(a); },
     [](const Device&, const QpAddress& a, std::string* why) {
       return shm::reachable(shm::ShmAddress::decode(a), why);
     },
     /*optional=*/false, shm::remove_stale_shm_sockets},
#if RDMX_HAVE_VERBS
    {"verbs",
     [](const std::string& why, core::DeviceResources r) { return verbs::open_verbs_device(why, std::move(r)); },
     [](const QpAddress& a) { return verbs::is_verbs_address(a); },
     [](const Device& d, const QpAddress& a, std::string* why) { return verbs::reaches(d, a, why); },
     /*optional=*/true},
#endif
    {"tcp", [](const std::string& why, core::DeviceResources r) { return tcp::open_tcp_device(why, std::move(r)); },
     [](const QpAddress& a) { return tcp::is_tcp_address(a); },
     [](const Device&, const QpAddress&, std::string* why) {
       *why = "tcp reaches processes on any host";
       return true;
     }},
  };
  return kProviders;
}

}  // namespace

std::size_t remove_stale_endpoints() {
  std::size_t removed = 0;
  for (const auto& p : providers()) {
    if (p.remove_stale != nullptr) removed += p.remove_stale();
  }
  return removed;
}

namespace {

std::string provider_list() {
  std::string out;
  for (const auto& p : providers()) out += (out.empty() ? "" : ", ") + std::string(p.name);
  return out;
}

std::shared_ptr<Device> open_auto() {
  core::DeviceResources resources;
  std::vector<autosel::Candidate> candidates;
  std::string skipped;
  for (const auto& p : providers()) {
    std::shared_ptr<Device> device;
    try {
      device = p.open("auto candidate", resources);
    } catch (const Error& e) {
      if (!p.optional) throw;
      // Said, not hidden: `rdmx info` and INFO logs show why it is left out.
      skipped += std::string("; ") + p.name + " left out: " + e.message();
      RDMX_INFO("auto: %s left out: %s", p.name, e.what());
      continue;
    }
    Device* raw = device.get();
    auto reaches = [raw, fn = p.reaches](const QpAddress& a, std::string* why) { return fn(*raw, a, why); };
    candidates.push_back({p.name, std::move(device), reaches, p.owns});
  }
  return autosel::open_auto_device(std::move(candidates), resources,
                                   "auto: the first provider that reaches each peer (order: " + provider_list() +
                                       "); RDMX_PROVIDER=<name> forces one" + skipped);
}
}  // namespace

std::vector<std::string> available_providers() {
  std::vector<std::string> names;
  for (const auto& p : providers()) names.emplace_back(p.name);
  return names;
}

std::shared_ptr<Device> open_device(std::string_view requested) {
  // Engine and copy threads read these settings; a bad value must fail here,
  // on the caller's thread, as an Error naming the variable.
  core::timeout();
  core::rnr_timeout();
  core::spin_budget();
  std::string name(requested);
  std::string why;
  if (name.empty() || name == "auto") {
    if (auto forced = kProvider.read(); forced && *forced != "auto") {
      name = *forced;
      why = "RDMX_PROVIDER=" + name;
    } else {
      auto device = open_auto();
      RDMX_INFO("opened device %s: %s", device->name().c_str(), device->selection_reason().c_str());
      return device;
    }
  } else {
    why = "requested by the caller";
  }
  auto it = std::find_if(providers().begin(), providers().end(), [&](const auto& p) { return name == p.name; });
  if (it == providers().end()) {
    throw Error(ErrorCode::NotFound, "unknown provider \"" + name + "\"",
                {.op = "open_device", .hint = "providers built: " + provider_list() + " (or \"auto\")"});
  }
  auto device = it->open(why, core::DeviceResources{});
  RDMX_INFO("opened device %s: %s", device->name().c_str(), device->selection_reason().c_str());
  return device;
}

}  // namespace rdmx
