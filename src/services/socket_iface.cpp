// SPDX-License-Identifier: MIT
#include "services/socket_iface.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "rdmx/bootstrap.hpp"
#include "rdmx/error.hpp"
#include "services/config.hpp"
#include "services/log.hpp"
#include "services/settings.hpp"

namespace rdmx::core {
namespace {

constexpr core::TextSetting kSocketIfname{
    "RDMX_SOCKET_IFNAME", "auto",
    "tcp: interfaces to use, as NCCL_SOCKET_IFNAME (name prefixes, ^ excludes, = exact; where several match, "
    "local rank l takes the (l mod k)-th of the k, one NIC per rail); auto: the interface the route to the job's "
    "store leaves by, else the first up that is neither loopback nor docker*, else loopback"};
RDMX_SETTING(kSocketIfname);
constexpr core::TextSetting kSocketFamily{"RDMX_SOCKET_FAMILY", "any",
                                          "tcp: AF_INET or AF_INET6 (any: IPv4 preferred)"};
RDMX_SETTING(kSocketFamily);

struct NameFilter {
  bool exclude = false;
  bool exact = false;
  std::vector<std::string> names;

  bool matches(const std::string& name) const {
    bool hit = false;
    for (const auto& n : names) {
      if (exact ? name == n : name.rfind(n, 0) == 0) hit = true;
    }
    return exclude ? !hit : hit;
  }
};

NameFilter parse_filter(std::string spec) {
  NameFilter filter;
  if (!spec.empty() && spec[0] == '^') {
    filter.exclude = true;
    spec.erase(0, 1);
  }
  if (!spec.empty() && spec[0] == '=') {
    filter.exact = true;
    spec.erase(0, 1);
  }
  std::size_t start = 0;
  while (start <= spec.size()) {
    auto comma = spec.find(',', start);
    auto item = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) filter.names.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return filter;
}

// Where the kernel sends packets for the job's store: the source address a
// datagram socket connected there gets (connect() on UDP sends nothing).
struct StoreRoute {
  std::string store;  // "10.0.0.1:29500"
  sockaddr_storage source{};
  bool loopback = false;
};

std::optional<StoreRoute> route_to_store(int family) {
  LaunchInfo launch;
  try {
    if (!launcher_present()) return std::nullopt;
    launch = detect_launch();
  } catch (const Error&) {
    return std::nullopt;  // the bootstrap reports a broken launcher environment itself
  }
  if (launch.store_host.empty()) return std::nullopt;
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  std::string host = launch.store_host;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (getaddrinfo(host.c_str(), std::to_string(launch.store_port).c_str(), &hints, &found) != 0) return std::nullopt;
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> guard(found, freeaddrinfo);
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    StoreRoute route;
    socklen_t length = sizeof(route.source);
    const bool ok = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
                    ::getsockname(fd, reinterpret_cast<sockaddr*>(&route.source), &length) == 0;
    ::close(fd);
    if (!ok) continue;
    route.store = format_address(a->ai_addr);
    if (route.source.ss_family == AF_INET) {
      route.loopback = (ntohl(reinterpret_cast<const sockaddr_in*>(&route.source)->sin_addr.s_addr) >> 24) == 127;
    } else {
      const auto& a6 = reinterpret_cast<const sockaddr_in6*>(&route.source)->sin6_addr;
      route.loopback = IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
    }
    return route;
  }
  return std::nullopt;
}

bool same_host_address(const sockaddr* a, const sockaddr_storage& b) {
  if (a->sa_family != b.ss_family) return false;
  if (a->sa_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(&b)->sin_addr.s_addr;
  }
  return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                     &reinterpret_cast<const sockaddr_in6*>(&b)->sin6_addr, sizeof(in6_addr)) == 0;
}

bool is_link_local_v6(const sockaddr* sa) {
  if (sa->sa_family != AF_INET6) return false;
  const auto* a = reinterpret_cast<const sockaddr_in6*>(sa);
  return IN6_IS_ADDR_LINKLOCAL(&a->sin6_addr);
}
}  // namespace

std::string format_host(const sockaddr* address) {
  std::string text = format_address(address);
  text = text.substr(0, text.rfind(':'));
  if (text.size() > 2 && text.front() == '[') text = text.substr(1, text.size() - 2);
  return text;
}

std::string format_address(const sockaddr* address) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (address->sa_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(address);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    return std::string(host) + ":" + std::to_string(ntohs(a->sin_port));
  }
  if (address->sa_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(address);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    std::string scope = a->sin6_scope_id != 0 ? "%" + std::to_string(a->sin6_scope_id) : "";
    return "[" + std::string(host) + scope + "]:" + std::to_string(ntohs(a->sin6_port));
  }
  return "<unknown address family>";
}

SocketInterface choose_interface() {
  auto spec = kSocketIfname.read();
  auto family_text = kSocketFamily.read();
  int family = AF_UNSPEC;
  if (family_text) {
    if (*family_text == "AF_INET" || *family_text == "4" || *family_text == "ipv4")
      family = AF_INET;
    else if (*family_text == "AF_INET6" || *family_text == "6" || *family_text == "ipv6")
      family = AF_INET6;
    else {
      throw Error(ErrorCode::Config, "RDMX_SOCKET_FAMILY=\"" + *family_text + "\" is not an address family",
                  {.op = "open_device tcp", .hint = "use AF_INET or AF_INET6"});
    }
  }

  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    throw Error(ErrorCode::System, std::string("getifaddrs failed: ") + std::strerror(errno),
                {.op = "open_device tcp"});
  }
  std::unique_ptr<ifaddrs, void (*)(ifaddrs*)> guard(list, freeifaddrs);

  struct Candidate {
    const ifaddrs* entry;
    int rank;  // lower is better
  };
  std::vector<Candidate> candidates;
  std::string seen;
  NameFilter filter;
  if (spec) filter = parse_filter(*spec);
  for (const ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || !(it->ifa_flags & IFF_UP)) continue;
    int fam = it->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    std::string name = it->ifa_name;
    if (seen.find(name) == std::string::npos) seen += (seen.empty() ? "" : " ") + name;
    if (family != AF_UNSPEC && fam != family) continue;
    bool loopback = (it->ifa_flags & IFF_LOOPBACK) != 0;
    int rank = 0;
    if (spec) {
      if (!filter.matches(name)) continue;
    } else {
      if (loopback || name.rfind("docker", 0) == 0) rank += 10;  // only when nothing else exists
    }
    if (family == AF_UNSPEC && fam == AF_INET6) rank += 2;  // prefer IPv4
    if (is_link_local_v6(it->ifa_addr)) rank += 1;          // prefer routable IPv6
    candidates.push_back({it, rank});
  }
  if (candidates.empty()) {
    throw Error(ErrorCode::NotFound, "no usable network interface for the tcp provider",
                {.op = "open_device tcp",
                 .hint = "interfaces up: [" + seen + "]; RDMX_SOCKET_IFNAME=" + (spec ? *spec : "<unset>") +
                         ", RDMX_SOCKET_FAMILY=" + (family_text ? *family_text : "<unset>") +
                         "; set RDMX_SOCKET_IFNAME to one of them"});
  }
  // Each interface's best address; with RDMX_SOCKET_IFNAME matching several
  // interfaces at the best rank, the ranks of a host spread over them by
  // local rank, one rail per NIC as NCCL's rings are: local rank l of every
  // host takes the same NIC, so the hierarchical algorithms' rings across
  // hosts (one per local index) each cross one NIC of every host.
  std::vector<const Candidate*> rails;
  for (const auto& c : candidates) {
    bool replaced = false;
    for (auto& r : rails) {
      if (std::strcmp(r->entry->ifa_name, c.entry->ifa_name) != 0) continue;
      if (c.rank < r->rank) r = &c;
      replaced = true;
    }
    if (!replaced) rails.push_back(&c);
  }
  const Candidate* first_best = &candidates.front();
  for (const auto& c : candidates) {
    if (c.rank < first_best->rank) first_best = &c;
  }
  std::erase_if(rails, [first_best](const Candidate* r) { return r->rank != first_best->rank; });
  int local_rank = 0;
  if (spec && rails.size() > 1) {
    // By name, so that every host numbers its NICs alike.
    std::sort(rails.begin(), rails.end(), [](const Candidate* a, const Candidate* b) {
      return std::strcmp(a->entry->ifa_name, b->entry->ifa_name) < 0;
    });
    try {
      if (launcher_present()) local_rank = std::max(detect_launch().local_rank, 0);
    } catch (const Error&) {
      // The bootstrap reports a broken launcher environment itself.
    }
  }
  const Candidate* best =
      spec && rails.size() > 1 ? rails[static_cast<std::size_t>(local_rank) % rails.size()] : first_best;
  SocketInterface chosen;
  std::optional<StoreRoute> route;
  const Candidate* routed = nullptr;
  if (!spec) route = route_to_store(family);
  if (route && !route->loopback) {
    for (const auto& c : candidates) {
      if (same_host_address(c.entry->ifa_addr, route->source)) routed = &c;
    }
  }
  if (routed != nullptr) {
    best = routed;
    for (const auto& c : candidates) {
      const std::string name = c.entry->ifa_name;
      if (c.rank >= 10 || name == routed->entry->ifa_name) continue;
      if (std::any_of(chosen.skipped.begin(), chosen.skipped.end(),
                      [&](const SocketInterface::Skipped& s) { return s.name == name; }))
        continue;
      chosen.skipped.push_back(
          {name, format_host(c.entry->ifa_addr),
           "the route to the store " + route->store + " leaves by " + routed->entry->ifa_name + ", not by " + name});
    }
  }
  chosen.name = best->entry->ifa_name;
  chosen.address_len = best->entry->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  std::memcpy(&chosen.address, best->entry->ifa_addr, chosen.address_len);
  if (chosen.address.ss_family == AF_INET6) {
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&chosen.address);
    if (IN6_IS_ADDR_LINKLOCAL(&a6->sin6_addr)) a6->sin6_scope_id = if_nametoindex(chosen.name.c_str());
  }
  if (spec && rails.size() > 1) {
    std::string names;
    for (const auto* r : rails) names += (names.empty() ? "" : " ") + std::string(r->entry->ifa_name);
    chosen.why = "RDMX_SOCKET_IFNAME=" + *spec + " matched " + std::to_string(rails.size()) + " interfaces (" + names +
                 "): local rank " + std::to_string(local_rank) + " takes " + chosen.name + ", one NIC per local rank";
  } else if (spec) {
    chosen.why = "RDMX_SOCKET_IFNAME=" + *spec + " matched " + chosen.name;
  } else if (routed != nullptr) {
    chosen.why = "the route to the job's store " + route->store + " leaves by it (set RDMX_SOCKET_IFNAME to choose)";
    for (const auto& s : chosen.skipped) chosen.why += "; skipped " + s.name + " (" + s.address + "): " + s.reason;
  } else if (best->rank >= 10) {
    chosen.why = "no non-loopback interface is up; using " + chosen.name;
  } else if (route && route->loopback) {
    chosen.why = "the job's store " + route->store +
                 " is on loopback; the first interface up that is not loopback or docker (set RDMX_SOCKET_IFNAME to "
                 "choose)";
  } else {
    chosen.why = "first interface up that is not loopback or docker (set RDMX_SOCKET_IFNAME to choose)";
  }
  if (family_text) chosen.why += ", RDMX_SOCKET_FAMILY=" + *family_text;
  if (!chosen.skipped.empty()) {
    static std::atomic<bool> said{false};  // the tcp provider and the control mesh both ask
    if (!said.exchange(true)) RDMX_INFO("tcp: using interface %s: %s", chosen.name.c_str(), chosen.why.c_str());
  }
  return chosen;
}

}  // namespace rdmx::core
