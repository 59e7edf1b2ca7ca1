// SPDX-License-Identifier: MIT
#include "services/port_range.hpp"

#include <netinet/in.h>

#include <cerrno>
#include <charconv>

#include "rdmx/error.hpp"
#include "services/kernel_random.hpp"
#include "services/settings.hpp"

namespace rdmx::core {
namespace {

constexpr TextSetting kPortRange{
    "RDMX_PORT_RANGE", "any",
    "ports the listeners of tcp QPs, the control mesh and rdmx doctor take, as FIRST-LAST (a range a firewall "
    "leaves open; each rank takes two, rdmx doctor one per interface); any: what the kernel gives"};
RDMX_SETTING(kPortRange);

bool parse_port(std::string_view text, std::uint16_t& out) {
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() || text[0] == '0' || value > 65535)
    return false;
  out = static_cast<std::uint16_t>(value);
  return true;
}

void set_port(sockaddr_storage& address, std::uint16_t port) {
  if (address.ss_family == AF_INET6)
    reinterpret_cast<sockaddr_in6*>(&address)->sin6_port = htons(port);
  else
    reinterpret_cast<sockaddr_in*>(&address)->sin_port = htons(port);
}

}  // namespace

std::string PortRange::text() const { return any() ? "any" : std::to_string(first) + "-" + std::to_string(last); }

PortRange port_range() {
  const auto text = kPortRange.read();
  if (!text || *text == "any") return {};
  PortRange range;
  const auto dash = text->find('-');
  if (dash == std::string::npos || !parse_port(std::string_view(*text).substr(0, dash), range.first) ||
      !parse_port(std::string_view(*text).substr(dash + 1), range.last) || range.first > range.last) {
    throw Error(ErrorCode::Config, "RDMX_PORT_RANGE=\"" + *text + "\" is not a port range",
                {.op = "listen",
                 .hint = "write FIRST-LAST with 1 <= FIRST <= LAST <= 65535, e.g. 40000-40999, "
                         "or any"});
  }
  return range;
}

int bind_in_port_range(int fd, const sockaddr_storage& address, socklen_t length, const PortRange& range) {
  sockaddr_storage at = address;
  if (range.any()) {
    set_port(at, 0);
    return ::bind(fd, reinterpret_cast<const sockaddr*>(&at), length) == 0 ? 0 : errno;
  }
  const unsigned count = static_cast<unsigned>(range.last - range.first) + 1;
  const unsigned start = static_cast<unsigned>(kernel_random64() % count);
  int error = EADDRINUSE;
  for (unsigned i = 0; i < count; ++i) {
    set_port(at, static_cast<std::uint16_t>(range.first + (start + i) % count));
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&at), length) == 0) return 0;
    error = errno;
    if (error != EADDRINUSE && error != EACCES) return error;
  }
  return error;
}

}  // namespace rdmx::core
