// SPDX-License-Identifier: MIT
// probe_providers() and settings(): what `rdmx info` reports about the
// library itself. Providers are probed by opening them exactly as an
// application would, so a reason printed here is the error it would get;
// settings are the registry's (services/settings.hpp), each with its value in force.

#include <algorithm>
#include <cstring>

#include "coll/cuda/kernels.hpp"
#include "driver/provider.hpp"
#include "rdmx/error.hpp"
#include "rdmx/info.hpp"
#include "services/auth.hpp"
#include "services/config.hpp"
#include "services/cuda/driver.hpp"
#include "services/settings.hpp"

extern char** environ;

namespace rdmx {
namespace {

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

}  // namespace

std::vector<ProviderStatus> probe_providers() {
  std::vector<ProviderStatus> statuses;
  for (const core::ProviderDescriptor* p : core::provider_descriptors()) {
    const core::ProviderDescriptor& d = *p;
    statuses.push_back(d.built ? probe_built(d.name) : ProviderStatus{.name = d.name, .reason = d.not_built()});
  }
  return statuses;
}

std::vector<ProviderDeclaration> declared_providers() {
  std::vector<ProviderDeclaration> out;
  for (const core::ProviderDescriptor* p : core::provider_descriptors()) {
    const core::ProviderDescriptor& d = *p;
    out.push_back({.name = d.name,
                   .built = d.built,
                   .latency_us = d.figures.latency_us,
                   .bandwidth_gbps = d.figures.bandwidth_gbps,
                   .basis = d.figures.basis,
                   .same_host_connection_memory = d.figures.same_host_connection_memory});
  }
  return out;
}

AuthStatus probe_auth() {
  AuthStatus status;
  try {
    status.authenticated = core::auth::key_configured();
    status.how = status.authenticated
                     ? "connections prove the job secret from " + core::auth::key_source() +
                           " (HMAC-SHA256 challenge-response, libsodium)"
                     : "not authenticated: any process that can reach this host's ports can connect a QP or use the "
                       "store; set RDMX_AUTH_KEY or RDMX_AUTH_KEY_FILE on every rank (rdmx run sets one per job)";
  } catch (const Error& e) {
    status.how = std::string("refused: ") + e.what();
  }
  return status;
}

CudaStatus probe_cuda() {
  CudaStatus status;
  const core::cuda::DriverLoad& load = core::cuda::load_driver();
  status.usable = load.api != nullptr;
  status.reason = load.reason;
  status.driver_version = load.version;
  status.kernels_note = coll::cuda_kernels_note();
  status.kernels = coll::cuda_kernels_built();
  return status;
}

std::chrono::milliseconds default_timeout() { return core::timeout(); }

std::vector<Setting> settings() {
  std::vector<Setting> list;
  for (const core::Setting* declared : core::registered_settings()) {
    Setting s{.name = declared->name(), .meaning = declared->doc(), .default_value = declared->default_text()};
    const auto text = declared->raw();
    s.from_env = text.has_value();
    try {
      s.value = declared->value_text();
      // A choice the library does not know it replaces by its default (with a
      // warning); the report shows the value in force and what was ignored.
      if (text && declared->ignored()) s.value += " (ignored \"" + *text + "\": malformed)";
    } catch (const Error& e) {
      // A value the library refuses (services/settings.hpp): shown as refused, with the library's reason.
      s.value = text.value_or("") + " (refused)";
      s.meaning = "refused: " + e.message() + " (" + e.context().hint + ")";
    }
    list.push_back(std::move(s));
  }
  std::vector<Setting> unknown;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr || std::strncmp(*e, "RDMX_", 5) != 0) continue;
    const std::string name(*e, static_cast<std::size_t>(eq - *e));
    if (std::any_of(list.begin(), list.end(), [&](const Setting& s) { return s.name == name; })) continue;
    unknown.push_back({.name = name,
                       .value = eq + 1,
                       .from_env = true,
                       .meaning = "not a known setting: the library does not read it (a typo?)"});
  }
  std::sort(unknown.begin(), unknown.end(), [](const Setting& a, const Setting& b) { return a.name < b.name; });
  list.insert(list.end(), unknown.begin(), unknown.end());
  return list;
}

}  // namespace rdmx
