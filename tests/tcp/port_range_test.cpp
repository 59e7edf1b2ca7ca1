// SPDX-License-Identifier: MIT
// RDMX_PORT_RANGE bounds the ports a tcp device listens on (the control
// mesh's listener uses the same binding, and the multi-host bed test runs a
// job behind a firewall that opens only the range); and without
// RDMX_SOCKET_IFNAME, the interface is the one the route to the store
// leaves by.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "rdmx/error.hpp"
#include "rdmx/info.hpp"
#include "rdmx/verbs.hpp"
#include "support/scoped_env.hpp"

namespace rdmx::test {
namespace {

int port_of_device(const Device& device) {
  const std::string name = device.name();  // "tcp:eth0/10.0.0.1:41234"
  return std::stoi(name.substr(name.rfind(':') + 1));
}

// A port no one listens on now, from the kernel, and its socket's release.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  ::bind(fd, reinterpret_cast<const sockaddr*>(&at), sizeof(at));
  socklen_t length = sizeof(at);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&at), &length);
  ::close(fd);
  return ntohs(at.sin_port);
}

TEST(PortRange, MalformedRangesAreRefusedNamingTheSetting) {
  for (const char* text : {"abc", "5-3", "0-10", "70000-70001", "10", "010-20", "-", "1-2-3"}) {
    ScopedEnv range("RDMX_PORT_RANGE", text);
    try {
      listen_ports();
      ADD_FAILURE() << "RDMX_PORT_RANGE=" << text << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Config) << text;
      EXPECT_NE(std::string(e.what()).find("RDMX_PORT_RANGE=\"" + std::string(text) + "\""), std::string::npos)
          << e.what();
    }
  }
  ScopedEnv range("RDMX_PORT_RANGE", "41000-41009");
  const ListenPorts ports = listen_ports();
  EXPECT_EQ(ports.first, 41000);
  EXPECT_EQ(ports.last, 41009);
  EXPECT_EQ(ports.text, "41000-41009");
}

TEST(PortRange, ATcpDeviceListensInsideTheRange) {
  ScopedEnv ifname("RDMX_SOCKET_IFNAME", "lo");
  const int first = free_port();
  const int last = std::min(first + 3, 65535);
  const std::string text = std::to_string(first) + "-" + std::to_string(last);
  ScopedEnv range("RDMX_PORT_RANGE", text.c_str());
  auto device = open_device("tcp");
  const int port = port_of_device(*device);
  EXPECT_GE(port, first) << device->name();
  EXPECT_LE(port, last) << device->name();
}

TEST(PortRange, ARangeWithNoFreePortFailsNamingIt) {
  ScopedEnv ifname("RDMX_SOCKET_IFNAME", "lo");
  // Hold the only port of the range.
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&at), sizeof(at)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t length = sizeof(at);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&at), &length);
  const std::string port = std::to_string(ntohs(at.sin_port));
  ScopedEnv range("RDMX_PORT_RANGE", (port + "-" + port).c_str());
  try {
    open_device("tcp");
    ADD_FAILURE() << "a device opened with every port of RDMX_PORT_RANGE taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ports " + port + "-" + port), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Address already in use"), std::string::npos) << e.what();
  }
  ::close(fd);
}

// The first address of an interface that is up and not loopback, if any.
const NetInterface* routable(const HostTopology& topology, std::string& address) {
  for (const NetInterface& i : topology.interfaces) {
    if (!i.up || i.loopback) continue;
    for (const std::string& a : i.addresses) {
      if (a.find(':') != std::string::npos) continue;  // IPv4 keeps the test simple
      address = a.substr(0, a.find('/'));
      return &i;
    }
  }
  return nullptr;
}

TEST(SocketInterface, WithoutIfnameTheRouteToTheStoreChooses) {
  ScopedEnv ifname("RDMX_SOCKET_IFNAME", nullptr);
  ScopedEnv rank("RDMX_RANK", "1");
  ScopedEnv world("RDMX_WORLD_SIZE", "2");
  std::string address;
  const HostTopology topology = discover_topology();
  const NetInterface* iface = routable(topology, address);
  if (iface == nullptr) GTEST_SKIP() << "no IPv4 interface up besides loopback";
  {
    // The store on one of this host's own addresses: the route leaves by its interface.
    ScopedEnv store("RDMX_STORE", (address + ":29500").c_str());
    const SocketInterfaceChoice choice = socket_interface();
    ASSERT_TRUE(choice.usable) << choice.why;
    EXPECT_EQ(choice.name, iface->name);
    EXPECT_EQ(choice.address, address);
    EXPECT_NE(choice.why.find("the route to the job's store " + address + ":29500 leaves by it"), std::string::npos)
        << choice.why;
    for (const SkippedInterface& s : choice.skipped) {
      EXPECT_NE(s.name, iface->name);
      EXPECT_NE(s.reason.find("leaves by " + iface->name), std::string::npos) << s.reason;
    }
  }
  {
    ScopedEnv store("RDMX_STORE", "127.0.0.1:29500");
    const SocketInterfaceChoice choice = socket_interface();
    EXPECT_NE(choice.why.find("is on loopback"), std::string::npos) << choice.why;
  }
  {
    ScopedEnv set("RDMX_SOCKET_IFNAME", "lo");
    ScopedEnv store("RDMX_STORE", (address + ":29500").c_str());
    EXPECT_EQ(socket_interface().name, "lo");  // a name given wins over the route
  }
}

}  // namespace
}  // namespace rdmx::test
