// SPDX-License-Identifier: MIT
// What `rdmx perf fabric` concludes from its measurements: each link beside
// the others of its pattern and beside its line rate, the links that fall
// short, and the rank (its NIC) that every slow link goes through. Pure
// functions of the measured figures, so tests give them figures directly.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rdmx::cli::fabric {

// One direction between two ranks of different hosts.
struct Link {
  std::string pattern;  // "pairs": the two ranks alone on it; "ring": every rank sending to the next at once
  int from = 0;
  int to = 0;
  std::string from_host;
  std::string to_host;
  std::string device;        // how `from` reaches `to` (Communicator::peer_providers)
  std::string interface;     // from's network interface, as its device names it ("": none found)
  std::string to_interface;  // to's
  double gbps = 0;           // measured, GB/s (1e9 bytes)
  double line_gbps = 0;      // the interface's line rate, GB/s (0: unknown)
  // The two interfaces are on different networks (rails): the kernels'
  // routes, not the ranks' NICs, decide which NICs such a link crosses, so
  // it tells nothing of its ends' NICs.
  bool across_networks = false;
};

// A counter of a rank's interface that moved during the sweep.
struct CounterChange {
  int rank = 0;
  std::string host;
  std::string interface;
  std::string name;
  long long delta = 0;
};

struct Analysis {
  double threshold = 0.7;  // a link below this fraction of its pattern's upper quartile is slow
  std::vector<Link> links;
  std::vector<CounterChange> counters;
};

// The rdmx.perf_fabric/1 document (docs/schemas/perf_fabric.schema.json)
// without the run's own fields (ranks, hosts, size), which the caller adds.
nlohmann::json analyse(const Analysis& input);

// The document as tables and findings for a terminal.
std::string describe(const nlohmann::json& document);

}  // namespace rdmx::cli::fabric
