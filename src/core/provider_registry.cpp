// open_device(): maps provider names to factories and explains the choice.
#include <algorithm>
#include <functional>

#include "core/config.hpp"
#include "core/log.hpp"
#include "providers/shm/shm_factory.hpp"
#include "providers/tcp/tcp_factory.hpp"
#include "rdmx/verbs.hpp"

namespace rdmx {
namespace {

struct ProviderEntry {
  const char* name;
  // Returns a device; `why` is the reason it was chosen, for selection_reason().
  std::function<std::shared_ptr<Device>(const std::string& why)> open;
};

// Best first. shm and verbs join here when they exist.
const std::vector<ProviderEntry>& providers() {
  static const std::vector<ProviderEntry> kProviders = {
      {"tcp", [](const std::string& why) { return tcp::open_tcp_device(why); }},
      {"shm", [](const std::string& why) { return shm::open_shm_device(why); }},
  };
  return kProviders;
}

std::string provider_list() {
  std::string out;
  for (const auto& p : providers()) out += (out.empty() ? "" : ", ") + std::string(p.name);
  return out;
}
}  // namespace

std::vector<std::string> available_providers() {
  std::vector<std::string> names;
  for (const auto& p : providers()) names.emplace_back(p.name);
  return names;
}

std::shared_ptr<Device> open_device(std::string_view requested) {
  std::string name(requested);
  std::string why;
  if (name.empty() || name == "auto") {
    if (auto forced = core::env("RDMX_PROVIDER"); forced && *forced != "auto") {
      name = *forced;
      why = "RDMX_PROVIDER=" + name;
    } else {
      name = providers().front().name;
      why = "auto: " + name + " is the best provider built (built: " + provider_list() +
            "; shm and verbs are not built yet)";
    }
  } else {
    why = "requested by the caller";
  }
  auto it = std::find_if(providers().begin(), providers().end(), [&](const auto& p) { return name == p.name; });
  if (it == providers().end()) {
    throw Error(ErrorCode::NotFound, "unknown provider \"" + name + "\"",
                {.op = "open_device", .hint = "providers built: " + provider_list() + " (or \"auto\")"});
  }
  auto device = it->open(why);
  RDMX_INFO("opened device %s: %s", device->name().c_str(), device->selection_reason().c_str());
  return device;
}

}  // namespace rdmx
