// SPDX-License-Identifier: MIT
// The public view of how sockets are placed (rdmx/info.hpp).
#include "rdmx/error.hpp"
#include "rdmx/info.hpp"
#include "services/port_range.hpp"
#include "services/socket_iface.hpp"

namespace rdmx {

SocketInterfaceChoice socket_interface() {
  SocketInterfaceChoice out;
  try {
    const core::SocketInterface chosen = core::choose_interface();
    out.usable = true;
    out.name = chosen.name;
    out.address = core::format_host(reinterpret_cast<const sockaddr*>(&chosen.address));
    out.why = chosen.why;
    for (const auto& s : chosen.skipped) out.skipped.push_back({s.name, s.address, s.reason});
  } catch (const Error& e) {
    out.why = e.what();
  }
  return out;
}

ListenPorts listen_ports() {
  const core::PortRange range = core::port_range();
  return {range.first, range.last, range.text()};
}

}  // namespace rdmx
