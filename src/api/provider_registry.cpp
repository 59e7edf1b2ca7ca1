// SPDX-License-Identifier: MIT
// open_device(): opens a provider by name, or composes auto selection from
// every provider built in, and explains the choice. Providers are known only
// by their descriptors (driver/provider.hpp).
#include <algorithm>

#include "driver/provider.hpp"
#include "providers/auto/auto_device.hpp"
#include "rdmx/verbs.hpp"
#include "services/config.hpp"
#include "services/log.hpp"
#include "services/settings.hpp"

namespace rdmx {
namespace {

constexpr core::TextSetting kProvider{
    "RDMX_PROVIDER", "auto",
    "the provider open_device(\"auto\") opens (shm, verbs, tcp); auto picks per peer: shm on this host, else verbs "
    "where both sides have an RDMA port, else tcp"};
RDMX_SETTING(kProvider);

// The descriptors of the providers in this library, in auto selection's order.
std::vector<const core::ProviderDescriptor*> built() {
  std::vector<const core::ProviderDescriptor*> out;
  for (const core::ProviderDescriptor* d : core::provider_descriptors()) {
    if (d->built) out.push_back(d);
  }
  return out;
}

}  // namespace

std::size_t remove_stale_endpoints() {
  std::size_t removed = 0;
  for (const core::ProviderDescriptor* p : built()) {
    if (p->remove_stale != nullptr) removed += p->remove_stale();
  }
  return removed;
}

namespace {

std::string provider_list() {
  std::string out;
  for (const core::ProviderDescriptor* p : built()) out += (out.empty() ? "" : ", ") + std::string(p->name);
  return out;
}

std::shared_ptr<Device> open_auto() {
  core::DeviceResources resources;
  std::vector<autosel::Candidate> candidates;
  std::string skipped;
  for (const core::ProviderDescriptor* p : built()) {
    std::shared_ptr<Device> device;
    try {
      device = p->open("auto candidate", resources);
    } catch (const Error& e) {
      if (!p->optional) throw;
      // Said, not hidden: `rdmx info` and INFO logs show why it is left out.
      skipped += std::string("; ") + p->name + " left out: " + e.message();
      RDMX_INFO("auto: %s left out: %s", p->name, e.what());
      continue;
    }
    Device* raw = device.get();
    auto reaches = [raw, fn = p->reaches](const QpAddress& a, std::string* why) { return fn(*raw, a, why); };
    candidates.push_back({p->name, std::move(device), reaches, p->owns});
  }
  return autosel::open_auto_device(std::move(candidates), resources,
                                   "auto: the first provider that reaches each peer (order: " + provider_list() +
                                       "); RDMX_PROVIDER=<name> forces one" + skipped);
}
}  // namespace

std::vector<std::string> available_providers() {
  std::vector<std::string> names;
  for (const core::ProviderDescriptor* p : built()) names.emplace_back(p->name);
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
  const auto all = core::provider_descriptors();
  auto it = std::find_if(all.begin(), all.end(), [&](const core::ProviderDescriptor* p) { return name == p->name; });
  if (it == all.end()) {
    throw Error(ErrorCode::NotFound, "unknown provider \"" + name + "\"",
                {.op = "open_device", .hint = "providers built: " + provider_list() + " (or \"auto\")"});
  }
  // A provider left out of the build opens nothing: its stub says why.
  auto device = (*it)->open(why, core::DeviceResources{});
  RDMX_INFO("opened device %s: %s", device->name().c_str(), device->selection_reason().c_str());
  return device;
}

}  // namespace rdmx
