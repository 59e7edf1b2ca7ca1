// SPDX-License-Identifier: MIT
// Network interfaces: addresses from getifaddrs, the rest from sysfs, which
// knows what the addresses do not (link speed, MTU, the NIC's NUMA node).
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <memory>

#include "topo/sysfs.hpp"
#include "topo/topo.hpp"

namespace rdmx::topo {
namespace {

int prefix_length(const sockaddr* mask) {
  if (mask == nullptr) return -1;
  const unsigned char* bytes = nullptr;
  std::size_t size = 0;
  if (mask->sa_family == AF_INET) {
    bytes = reinterpret_cast<const unsigned char*>(&reinterpret_cast<const sockaddr_in*>(mask)->sin_addr);
    size = 4;
  } else if (mask->sa_family == AF_INET6) {
    bytes = reinterpret_cast<const unsigned char*>(&reinterpret_cast<const sockaddr_in6*>(mask)->sin6_addr);
    size = 16;
  } else {
    return -1;
  }
  int bits = 0;
  for (std::size_t i = 0; i < size; ++i) bits += std::popcount(static_cast<unsigned>(bytes[i]));
  return bits;
}

// "10.0.0.1/24", "fe80::1/64"; empty for families other than IP.
std::string format_address(const ifaddrs& entry) {
  char text[INET6_ADDRSTRLEN] = {};
  const sockaddr* address = entry.ifa_addr;
  if (address->sa_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(address)->sin_addr, text, sizeof text);
  } else if (address->sa_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr, text, sizeof text);
  } else {
    return {};
  }
  const int prefix = prefix_length(entry.ifa_netmask);
  return prefix >= 0 ? std::string(text) + "/" + std::to_string(prefix) : std::string(text);
}

NetInterface& find_or_add(std::vector<NetInterface>& interfaces, const std::string& name) {
  auto it = std::find_if(interfaces.begin(), interfaces.end(), [&](const NetInterface& i) { return i.name == name; });
  if (it != interfaces.end()) return *it;
  interfaces.push_back(NetInterface{.name = name});
  return interfaces.back();
}

}  // namespace

std::vector<NetInterface> scan_interfaces(const std::string& sysfs_net) {
  std::vector<NetInterface> interfaces;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return interfaces;
  std::unique_ptr<ifaddrs, void (*)(ifaddrs*)> guard(list, ::freeifaddrs);
  for (const ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    // Every interface has an AF_PACKET entry, so ones without an IP address are listed too.
    NetInterface& iface = find_or_add(interfaces, entry->ifa_name);
    iface.loopback = (entry->ifa_flags & IFF_LOOPBACK) != 0;
    iface.up = (entry->ifa_flags & IFF_UP) != 0;
    if (entry->ifa_addr == nullptr) continue;
    if (std::string address = format_address(*entry); !address.empty()) iface.addresses.push_back(address);
  }
  for (NetInterface& iface : interfaces) {
    const std::string dir = sysfs_net + "/" + iface.name + "/";
    // Administratively up is not enough: a cable pulled leaves the flag set
    // and operstate "down". "unknown" is what loopback and many virtual
    // interfaces report while they carry traffic.
    if (auto state = read_text(dir + "operstate"); state && *state != "up" && *state != "unknown") iface.up = false;
    if (auto mtu = read_integer(dir + "mtu")) iface.mtu = static_cast<int>(*mtu);
    if (auto speed = read_integer(dir + "speed"); speed && *speed > 0) iface.speed_mbps = static_cast<long>(*speed);
    // Virtual interfaces have no device/; PCI NICs on one-node hosts say -1.
    if (auto node = read_integer(dir + "device/numa_node"); node && *node >= 0) {
      iface.numa_node = static_cast<int>(*node);
    }
  }
  return interfaces;
}

}  // namespace rdmx::topo
