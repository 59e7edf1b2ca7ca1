// SPDX-License-Identifier: MIT
// Every rank of a communicator maps, for every peer it connects to, an inbox
// and a staging area (links_layout.hpp), whose pages are taken as data
// passes through them: its ring neighbours' when it is made, more as
// operations use them (an all_to_all connects every pair). n ranks on one
// host that all connect everyone and move large messages through every pair
// take about n * n * 2 * RDMX_COLL_BUFFSIZE of its memory:
// 64 ranks at 4 MiB ask for 32 GiB. Past what the host has, the kernel's OOM
// killer ends ranks one by one, long after the cause. So the communicator
// refuses up front what its creation connects, and an operation refuses the
// pairs it would connect beyond the host's memory, naming the figures and
// the settings that change them; it does not shrink the buffers itself, because RDMX_COLL_BUFFSIZE
// is a performance setting every rank must agree on, and a size picked from a
// moment's free memory would make a job's speed depend on what else ran.
#include "coll/comm_memory.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include "coll/links.hpp"
#include "coll/links_layout.hpp"
#include "coll/settings.hpp"
#include "rdmx/info.hpp"
#include "services/config.hpp"
#include "services/log.hpp"
#include "services/settings.hpp"

namespace rdmx::coll {
namespace {

std::string describe_auto();

constexpr core::TextSetting kMemory{
    "RDMX_COLL_MEMORY", "auto",
    "collectives: memory the buffers of one host's ranks may take, checked when a communicator is created and when "
    "an operation connects more peers (a size; auto: MemAvailable and the cgroup's memory limit; off: no check)",
    describe_auto};
RDMX_SETTING(kMemory);

// Below this a collective moves large messages in slivers: not worth suggesting.
constexpr std::size_t kSmallestSuggestedBuffsize = std::size_t{64} << 10;
// Cgroup limits at or above this mean "no limit" (v1 writes 2^63 rounded down to a page).
constexpr unsigned long long kNoLimit = 1ull << 60;

std::string human(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 5) {
    bytes /= 1024;
    ++unit;
  }
  const bool decimal = unit > 0 && bytes < 10 && std::fabs(bytes - std::round(bytes)) >= 0.05;
  char text[32];
  std::snprintf(text, sizeof text, decimal ? "%.1f %s" : "%.0f %s", bytes, kUnits[unit]);
  return text;
}

std::optional<unsigned long long> read_number(const std::string& path) {
  std::ifstream in(path);
  unsigned long long value = 0;
  if (!(in >> value)) return std::nullopt;  // absent, or "max"
  return value;
}

// A "key value" line of a memory.stat file.
unsigned long long stat_value(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string name;
  unsigned long long value = 0;
  while (in >> name >> value) {
    if (name == key) return value;
  }
  return 0;
}

void consider(HostMemory& best, std::size_t bytes, std::string from) {
  if (best.bytes == 0 || bytes < best.bytes) best = {std::max<std::size_t>(bytes, 1), std::move(from)};
}

// The room under the memory limit of the cgroup at `path` and each of its
// ancestors, where a limit is set. Usage counts page cache, which the kernel
// reclaims before it kills: the inactive part is not counted as used.
void consider_cgroup(HostMemory& best, const std::string& root, std::string path, const char* limit_file,
                     const char* usage_file, const char* inactive_key) {
  while (true) {
    const std::string dir = root + (path == "/" ? "" : path);
    const auto limit = read_number(dir + "/" + limit_file);
    const auto usage = read_number(dir + "/" + usage_file);
    if (limit && usage && *limit < kNoLimit) {
      const unsigned long long inactive = stat_value(dir + "/memory.stat", inactive_key);
      const unsigned long long used = *usage > inactive ? *usage - inactive : 0;
      const unsigned long long room = *limit > used ? *limit - used : 0;
      consider(best, static_cast<std::size_t>(room),
               "cgroup " + path + ": " + limit_file + " " + human(static_cast<double>(*limit)) + ", " +
                   human(static_cast<double>(used)) + " in use");
    }
    if (path == "/" || path.empty()) return;
    const std::size_t slash = path.rfind('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
}

HostMemory measured() {
  HostMemory best;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    unsigned long long kib = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %llu kB", &kib) == 1) {
      consider(best, static_cast<std::size_t>(kib) * 1024, "MemAvailable in /proc/meminfo");
      break;
    }
  }
  // "hierarchy:controllers:path": "0::/path" for cgroup v2, "4:memory:/path" for v1.
  std::ifstream cgroups("/proc/self/cgroup");
  for (std::string line; std::getline(cgroups, line);) {
    const std::size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1), path = line.substr(second + 1);
    if (line.compare(0, first, "0") == 0 && controllers.empty()) {
      for (const char* root : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
        consider_cgroup(best, root, path, "memory.max", "memory.current", "inactive_file");
      }
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      consider_cgroup(best, "/sys/fs/cgroup/memory", path, "memory.limit_in_bytes", "memory.usage_in_bytes",
                      "total_inactive_file");
    }
  }
  return best;
}

std::string describe_auto() {
  const HostMemory m = measured();
  return m.bytes == 0 ? std::string("auto (unknown: no check)")
                      : "auto: " + human(static_cast<double>(m.bytes)) + " (" + m.from + ")";
}

// What one connection to a local peer maps, at most over the providers built
// in (any of them may carry the communicator's same-host links).
std::size_t same_host_connection_memory() {
  static const std::size_t bytes = [] {
    std::size_t most = 0;
    for (const ProviderDeclaration& p : declared_providers()) {
      if (p.built) most = std::max(most, p.same_host_connection_memory);
    }
    return most;
  }();
  return bytes;
}

// What one more connected peer takes: its inbox, staging area and their
// flags, the pages of its control words (at worst one of each of the five
// arrays), and, for a local peer, its share of the connection's memory.
std::size_t peer_bytes(const LinksConfig& config, bool local) {
  const Layout layout(1, config);
  return 2 * layout.slots * (layout.slot_bytes + wire::kLine) + 5 * 4096 +
         (local ? same_host_connection_memory() / 2 : 0);
}

// The ring neighbours, and the partners of the log-depth algorithms (recursive
// doubling, dissemination, trees: about log2 n each way), that small
// operations and barriers connect.
int expected_peers(int ranks) {
  int log2 = 0;
  while ((1 << log2) < ranks) ++log2;
  return std::min(ranks - 1, 2 + 2 * log2);
}

// The region's header and state page, and `peers` connected peers.
std::size_t per_rank_bytes(int peers, int local_ranks, const LinksConfig& config) {
  return wire::align_up(sizeof(Links::Control), 4096) + 4096 +
         static_cast<std::size_t>(peers) * peer_bytes(config, local_ranks > 1);
}

LinksConfig config_at(std::size_t buffsize) {
  LinksConfig config = links_config();
  config.chunk = buffsize / config.slots / wire::kLine * wire::kLine;
  return config;
}

}  // namespace

HostMemory host_memory() {
  const auto text = kMemory.read();
  std::string word = text.value_or("auto");
  std::transform(word.begin(), word.end(), word.begin(), [](unsigned char c) { return std::tolower(c); });
  if (word == "auto") return measured();
  if (word == "off") return {0, "RDMX_COLL_MEMORY=off"};
  const auto bytes = core::parse_size(*text);
  if (!bytes || *bytes == 0) {
    throw Error(ErrorCode::Config, "RDMX_COLL_MEMORY=\"" + *text + "\" is not a size, auto or off",
                {.op = "communicator create",
                 .hint = "give the memory one host's ranks may use for their buffers (e.g. RDMX_COLL_MEMORY=8G), "
                         "auto (the default: what the host has available) or off (no check)"});
  }
  return {*bytes, "RDMX_COLL_MEMORY=" + *text};
}

CommMemory estimate_comm_memory(int ranks, int local_ranks, const HostMemory& memory) {
  CommMemory m;
  m.ranks = std::max(ranks, 1);
  m.local_ranks = std::clamp(local_ranks, 1, m.ranks);
  m.buffsize = coll_settings().buffsize;
  m.peers = expected_peers(m.ranks);
  m.per_peer = peer_bytes(links_config(), m.local_ranks > 1);
  m.per_rank = per_rank_bytes(m.peers, m.local_ranks, links_config());
  m.per_host = m.per_rank * static_cast<std::size_t>(m.local_ranks);
  m.available = memory.bytes;
  m.available_from = memory.from;
  if (m.available == 0) return m;
  for (std::size_t b = kSmallestSuggestedBuffsize; b <= m.buffsize; b *= 2) {
    const LinksConfig config = config_at(b);
    if (config.chunk < wire::kLine) continue;
    const std::size_t need = per_rank_bytes(m.peers, m.local_ranks, config) * static_cast<std::size_t>(m.local_ranks);
    if (need <= m.available) m.fitting_buffsize = b;
  }
  return m;
}

void require_room_to_connect(int more, int connected, int local_ranks, const LinksConfig& config, int rank,
                             const std::string& op) {
  const HostMemory memory = host_memory();
  if (memory.bytes == 0 || more <= 0) return;
  const std::size_t per_peer = peer_bytes(config, local_ranks > 1);
  // MemAvailable has the connected peers' buffers taken out already; a
  // budget (RDMX_COLL_MEMORY) is for all of them.
  const bool budget = memory.from.rfind("RDMX_COLL_MEMORY=", 0) == 0;
  const std::size_t need =
      static_cast<std::size_t>(more + (budget ? connected : 0)) * per_peer * static_cast<std::size_t>(local_ranks);
  if (need <= memory.bytes) return;
  std::ostringstream sizes;
  sizes << "per_peer=" << per_peer << " more_peers=" << more << " connected=" << connected
        << " local_ranks=" << local_ranks << " need=" << need << " available=" << memory.bytes;
  throw Error(ErrorCode::Config,
              op + ": connecting rank " + std::to_string(rank) + " to " + std::to_string(more) +
                  " more peers (it has " + std::to_string(connected) + ") takes " +
                  human(static_cast<double>(per_peer)) + " of buffers per peer, " + human(static_cast<double>(need)) +
                  " if the " + std::to_string(local_ranks) + " ranks of its host do alike, and the host has " +
                  human(static_cast<double>(memory.bytes)) + " available (" + memory.from + ")",
              {.op = op,
               .rank = rank,
               .sizes = sizes.str(),
               .hint = "lower RDMX_COLL_BUFFSIZE (every rank alike), run fewer ranks on the host, or use algorithms "
                       "that talk to fewer peers (RDMX_ALGO); RDMX_COLL_MEMORY sets the memory the buffers may use"});
}

void require_buffers_fit(const std::vector<RankWhere>& everyone, int rank) {
  // Machines in the order of their lowest rank, so every rank reports the same one first.
  std::vector<std::string> order;
  std::map<std::string, std::pair<int, int>> machines;  // boot id -> (lowest rank, ranks)
  for (int p = 0; p < static_cast<int>(everyone.size()); ++p) {
    auto [it, fresh] = machines.try_emplace(everyone[static_cast<std::size_t>(p)].boot_id, p, 0);
    if (fresh) order.push_back(it->first);
    ++it->second.second;
  }
  const int size = static_cast<int>(everyone.size());
  for (const std::string& boot_id : order) {
    const auto [lowest, count] = machines[boot_id];
    const RankWhere& first = everyone[static_cast<std::size_t>(lowest)];
    CommMemory m = estimate_comm_memory(size, count, {first.memory, first.memory_from});
    m.host = first.name;
    if (!m.fits()) require_comm_memory_fits(m, "communicator create", rank);
    if (boot_id == everyone[static_cast<std::size_t>(rank)].boot_id) {
      RDMX_INFO("communicator buffers: %s per peer, %s per rank, %s for the %d ranks on %s; %s available (%s)",
                human(static_cast<double>(m.per_peer)).c_str(), human(static_cast<double>(m.per_rank)).c_str(),
                human(static_cast<double>(m.per_host)).c_str(), count, m.host.c_str(),
                m.available == 0 ? "unknown" : human(static_cast<double>(m.available)).c_str(),
                m.available == 0 ? "not checked" : m.available_from.c_str());
    }
  }
}

}  // namespace rdmx::coll

namespace rdmx {

CommMemory comm_memory(int ranks, int local_ranks) {
  return coll::estimate_comm_memory(ranks, local_ranks, coll::host_memory());
}

void require_comm_memory_fits(const CommMemory& m, const std::string& op, int rank) {
  if (m.fits()) return;
  using coll::human;
  const std::string host = m.host.empty() ? "this host" : "host " + m.host;
  std::string hint = m.fitting_buffsize != 0
                         ? "lower RDMX_COLL_BUFFSIZE (RDMX_COLL_BUFFSIZE=" + core::format_size(m.fitting_buffsize) +
                               " fits; large collectives then move in smaller pieces), or run fewer ranks on the host"
                         : "run fewer ranks on the host (the buffers grow with its ranks and the peers each "
                           "connects to), or lower RDMX_COLL_BUFFSIZE";
  hint +=
      "; RDMX_COLL_MEMORY sets the memory they may use instead of measuring it (off: no check, and the kernel's "
      "OOM killer ends ranks when memory runs out)";
  std::ostringstream sizes;
  sizes << "per_peer=" << m.per_peer << " per_rank=" << m.per_rank << " per_host=" << m.per_host
        << " available=" << m.available;
  throw Error(ErrorCode::Config,
              op + ": the collectives' buffers of the " + std::to_string(m.local_ranks) + " ranks on " + host +
                  " need " + human(static_cast<double>(m.per_host)) + " and it has " +
                  human(static_cast<double>(m.available)) + " available (" + m.available_from + "): each rank maps " +
                  human(static_cast<double>(m.per_peer)) + " per peer for the " + std::to_string(m.peers) +
                  " peers its operations are expected to connect to of the " + std::to_string(m.ranks) +
                  " ranks (ring neighbours and the log-depth algorithms' partners; an inbox and a staging area of "
                  "RDMX_COLL_BUFFSIZE=" +
                  human(static_cast<double>(m.buffsize)) + ", and its share of the shm rings to each local peer), " +
                  human(static_cast<double>(m.per_rank)) + " per rank",
              {.op = op, .rank = rank, .sizes = sizes.str(), .hint = hint});
}

}  // namespace rdmx
