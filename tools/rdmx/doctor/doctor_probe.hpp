// SPDX-License-Identifier: MIT
// The sockets of `rdmx doctor`: a listener on each address of a host, which
// answers every connection with a stamp of its clock, and probes from each
// local address (bound as the source) to the listeners of other hosts, all
// at once and bounded in time. A probe that reaches a listener measures the
// round trip and the other clock's offset, as NTP does with one exchange.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace rdmx::cli::doctor {

struct LocalAddress {
  std::string interface;
  std::string address;  // numeric, no port
  int prefix = 0;
};

// Listeners on the given addresses, each on a port of [first, last] (0, 0:
// any), answering until destroyed.
class Listeners {
 public:
  Listeners(const std::vector<LocalAddress>& addresses, std::uint16_t first, std::uint16_t last);
  ~Listeners();
  Listeners(const Listeners&) = delete;
  Listeners& operator=(const Listeners&) = delete;
  // Per address, in order: the port (0 when it failed) and why it failed.
  const std::vector<int>& ports() const { return ports_; }
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  void serve();
  std::vector<int> fds_;
  std::vector<int> ports_;
  std::vector<std::string> errors_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

struct ProbeTarget {
  std::string from_address;  // bound as the source
  std::string to_address;
  int port = 0;
};

struct ProbeResult {
  std::string result;  // ok, refused, timeout, unreachable, wrong answer, error
  std::string detail;
  double rtt_ms = 0;
  double offset_ms = 0;  // the listener's clock minus this one's
};

// Every probe at once, each bounded by `seconds`.
std::vector<ProbeResult> probe_all(const std::vector<ProbeTarget>& targets, double seconds);

}  // namespace rdmx::cli::doctor
