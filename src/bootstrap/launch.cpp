// SPDX-License-Identifier: MIT
// Launcher detection (detect_launch) and joining a job (from_env).
#include <cerrno>  // program_invocation_name
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "bootstrap/net.hpp"
#include "bootstrap/store_common.hpp"
#include "services/auth.hpp"
#include "services/config.hpp"
#include "services/log.hpp"
#include "services/settings.hpp"

namespace rdmx {
namespace {

// Where each launcher puts rank, size and node-local placement. The first
// launcher (in this order) with any of its `triggers` set is the one used.
struct LauncherVariables {
  const char* name;
  const char* display;
  std::vector<const char*> triggers;
  const char* rank;
  std::vector<const char*> world_size;  // first one set wins
  const char* local_rank;
  const char* local_world_size;  // nullptr: derived differently (Slurm)
};

constexpr core::TextSetting kRank{"RDMX_RANK", "unset", "this process's rank (bootstrap; rdmx run sets it)"};
RDMX_SETTING(kRank);
constexpr core::TextSetting kWorldSize{"RDMX_WORLD_SIZE", "unset", "the number of ranks (bootstrap; rdmx run sets it)"};
RDMX_SETTING(kWorldSize);
constexpr core::TextSetting kLocalRank{"RDMX_LOCAL_RANK", "unset", "this process's rank among those on its host"};
RDMX_SETTING(kLocalRank);
constexpr core::TextSetting kLocalWorldSize{"RDMX_LOCAL_WORLD_SIZE", "unset", "the number of ranks on this host"};
RDMX_SETTING(kLocalWorldSize);
constexpr core::TextSetting kStore{
    "RDMX_STORE", "unset",
    "the job's store: host:port (rank 0 serves it when local) or file:/shared/dir; unset: MASTER_ADDR/MASTER_PORT"};
RDMX_SETTING(kStore);
// As torchrun's TORCHELASTIC_USE_AGENT_STORE: a launcher that outlives the
// ranks serves the store, so it survives rank 0 and no rank pays for serving.
constexpr core::FlagSetting kStoreExternal{
    "RDMX_STORE_EXTERNAL", false,
    "1: RDMX_STORE's host:port is already served (by rdmx run or rdmx_store), so rank 0 only connects to it"};
RDMX_SETTING(kStoreExternal);

const std::vector<LauncherVariables>& launchers() {
  static const std::vector<LauncherVariables> table = {
      {"rdmx",
       "rdmx",
       {kRank.name(), kWorldSize.name()},
       kRank.name(),
       {kWorldSize.name()},
       kLocalRank.name(),
       kLocalWorldSize.name()},
      {"torchrun", "torchrun", {"RANK", "WORLD_SIZE"}, "RANK", {"WORLD_SIZE"}, "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
      {"openmpi",
       "Open MPI",
       {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
       "OMPI_COMM_WORLD_RANK",
       {"OMPI_COMM_WORLD_SIZE"},
       "OMPI_COMM_WORLD_LOCAL_RANK",
       "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"mpich",
       "MPICH/Hydra",
       {"PMI_RANK", "PMI_SIZE"},
       "PMI_RANK",
       {"PMI_SIZE"},
       "MPI_LOCALRANKID",
       "MPI_LOCALNRANKS"},
      {"slurm", "Slurm", {"SLURM_PROCID"}, "SLURM_PROCID", {"SLURM_NTASKS", "SLURM_NPROCS"}, "SLURM_LOCALID", nullptr},
  };
  return table;
}

// Collects every problem found, so one error names all of them.
class EnvProblems {
 public:
  void missing(const std::string& name) { missing_.push_back(name); }
  void malformed(const std::string& name, const std::string& value, const std::string& expected) {
    malformed_.push_back(name + "=\"" + value + "\" (" + expected + ")");
  }
  void inconsistent(const std::string& what) { inconsistent_.push_back(what); }
  bool any() const { return !missing_.empty() || !malformed_.empty() || !inconsistent_.empty(); }

  std::string describe() const {
    std::string out;
    auto list = [](const std::vector<std::string>& items) {
      std::string text;
      for (std::size_t i = 0; i < items.size(); ++i) text += (i == 0 ? "" : ", ") + items[i];
      return text;
    };
    if (!missing_.empty()) out += "missing: " + list(missing_);
    if (!malformed_.empty()) out += std::string(out.empty() ? "" : "; ") + "malformed: " + list(malformed_);
    if (!inconsistent_.empty()) out += std::string(out.empty() ? "" : "; ") + "inconsistent: " + list(inconsistent_);
    return out;
  }

 private:
  std::vector<std::string> missing_;
  std::vector<std::string> malformed_;
  std::vector<std::string> inconsistent_;
};

std::optional<int> parse_count(const std::string& text) {
  auto value = bootstrap::parse_int64(text);
  if (!value || *value < 0 || *value > 0x7fffffff || text.front() == '+' || text.front() == '-') return std::nullopt;
  return static_cast<int>(*value);
}

// Reads a non-negative integer variable; records a problem when malformed,
// or when missing and required.
std::optional<int> read_count(const char* name, bool required, EnvProblems& problems) {
  auto text = core::env(name);
  if (!text) {
    if (required) problems.missing(name);
    return std::nullopt;
  }
  auto value = parse_count(*text);
  if (!value) problems.malformed(name, *text, "expected a non-negative integer");
  return value;
}

// Slurm has no per-node task count variable that is always a number:
// SLURM_TASKS_PER_NODE reads like "2(x3),1" (two tasks on each of three
// nodes, then one). Returns the count for node `node_id`, or -1.
int slurm_tasks_on_node(const std::string& tasks_per_node, int node_id) {
  int node = 0;
  std::size_t pos = 0;
  while (pos < tasks_per_node.size()) {
    std::size_t comma = tasks_per_node.find(',', pos);
    std::string item = tasks_per_node.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? tasks_per_node.size() : comma + 1;
    int repeat = 1;
    std::string count_text = item;
    if (auto open = item.find("(x"); open != std::string::npos) {
      if (item.back() != ')') return -1;
      auto parsed = parse_count(item.substr(open + 2, item.size() - open - 3));
      if (!parsed) return -1;
      repeat = *parsed;
      count_text = item.substr(0, open);
    }
    auto count = parse_count(count_text);
    if (!count) return -1;
    if (node_id < node + repeat) return *count;
    node += repeat;
  }
  return -1;
}

// Parses "host:port", "[v6]:port" or "file:/dir" into `info`.
void parse_store_address(const std::string& name, const std::string& text, LaunchInfo& info, EnvProblems& problems) {
  const std::string expected = "expected host:port, [ipv6]:port or file:/directory";
  if (text.rfind("file:", 0) == 0) {
    std::string directory = text.substr(5);
    if (directory.empty()) {
      problems.malformed(name, text, "file: needs a directory, e.g. file:/shared/job-42");
      return;
    }
    info.store_file = directory;
    return;
  }
  std::string host;
  std::string port_text;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      problems.malformed(name, text, expected);
      return;
    }
    host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string::npos || text.find(':') != colon) {
      problems.malformed(name, text,
                         colon == std::string::npos ? expected : expected + "; write IPv6 addresses in brackets");
      return;
    }
    host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
  }
  auto port = parse_count(port_text);
  if (host.empty() || !port || *port == 0 || *port > 65535) {
    problems.malformed(name, text, expected + " with a port in 1..65535");
    return;
  }
  info.store_host = host;
  info.store_port = static_cast<std::uint16_t>(*port);
}

std::string recognised_launchers_text() {
  std::string out;
  for (const auto& launcher : launchers()) {
    if (!out.empty()) out += ", ";
    std::string triggers;
    for (const char* trigger : launcher.triggers) triggers += std::string(triggers.empty() ? "" : "/") + trigger;
    out += triggers + " (" + launcher.display + ")";
  }
  return out;
}

// How this program was started (argv[0]), for a hint that can be pasted back.
std::string program_name() {
  const char* name = program_invocation_name;
  return name != nullptr && *name != '\0' ? name : "./my_program";
}

constexpr const char* kStoreHint =
    "export RDMX_STORE=host:port (rank 0 serves it when host is one of its addresses), RDMX_STORE=file:/shared/dir, "
    "or MASTER_ADDR and MASTER_PORT";

}  // namespace

bool launcher_present() {
  for (const auto& candidate : launchers()) {
    for (const char* trigger : candidate.triggers) {
      if (core::env(trigger)) return true;
    }
  }
  return false;
}

std::string new_job_secret() { return core::auth::new_job_secret(); }

LaunchInfo detect_launch() {
  const LauncherVariables* launcher = nullptr;
  std::string trigger_seen;
  for (const auto& candidate : launchers()) {
    for (const char* trigger : candidate.triggers) {
      if (core::env(trigger)) {
        launcher = &candidate;
        trigger_seen = trigger;
        break;
      }
    }
    if (launcher != nullptr) break;
  }
  if (launcher == nullptr) {
    throw Error(
        ErrorCode::Config,
        "no launcher recognised: none of " + recognised_launchers_text() +
            " is set, so this process does not know its rank (was it started on its own?)",
        ErrorContext{.op = "detect_launch",
                     .hint = "start N ranks of it with rdmx run -n N -- CMD (e.g. rdmx run -n 2 -- " + program_name() +
                             "), or under torchrun, mpirun or srun; or export RDMX_RANK, "
                             "RDMX_WORLD_SIZE and RDMX_STORE=host:port (or file:/shared/dir)"});
  }

  LaunchInfo info;
  info.launcher = launcher->name;
  EnvProblems problems;
  auto rank = read_count(launcher->rank, true, problems);
  std::optional<int> world_size;
  bool world_size_given = false;
  for (const char* name : launcher->world_size) {
    if (core::env(name)) {
      world_size = read_count(name, true, problems);
      world_size_given = true;
      break;
    }
  }
  if (!world_size_given) problems.missing(launcher->world_size.front());
  auto local_rank = read_count(launcher->local_rank, false, problems);
  std::optional<int> local_world_size;
  if (launcher->local_world_size != nullptr) {
    local_world_size = read_count(launcher->local_world_size, false, problems);
  } else {
    // The step's layout (srun) is the one that matters; the job's is the fallback.
    auto tasks = core::env("SLURM_STEP_TASKS_PER_NODE");
    if (!tasks) tasks = core::env("SLURM_TASKS_PER_NODE");
    auto node_id = core::env("SLURM_NODEID");
    auto node = node_id ? parse_count(*node_id) : std::nullopt;
    int count = tasks && node ? slurm_tasks_on_node(*tasks, *node) : -1;
    if (count > 0) local_world_size = count;
  }

  if (world_size && *world_size == 0) problems.inconsistent(std::string(launcher->world_size.front()) + " is 0");
  if (rank && world_size && *world_size > 0 && *rank >= *world_size) {
    problems.inconsistent("rank " + std::to_string(*rank) + " >= world size " + std::to_string(*world_size));
  }
  if (local_rank && local_world_size && *local_rank >= *local_world_size) {
    problems.inconsistent("local rank " + std::to_string(*local_rank) + " >= local world size " +
                          std::to_string(*local_world_size));
  }
  if (local_world_size && world_size && *local_world_size > *world_size) {
    problems.inconsistent("local world size " + std::to_string(*local_world_size) + " > world size " +
                          std::to_string(*world_size));
  }

  // The store: RDMX_STORE, else MASTER_ADDR/MASTER_PORT (both or neither).
  if (auto store = kStore.read()) {
    parse_store_address(kStore.name(), *store, info, problems);
  } else {
    auto master_addr = core::env("MASTER_ADDR");
    auto master_port = core::env("MASTER_PORT");
    if (master_addr && !master_port) problems.missing("MASTER_PORT (MASTER_ADDR is set)");
    if (master_port && !master_addr) problems.missing("MASTER_ADDR (MASTER_PORT is set)");
    if (master_addr && master_port) {
      auto port = parse_count(*master_port);
      // torchrun's agent already serves torch.distributed's TCPStore on
      // MASTER_PORT, so under torchrun rdmx's store takes the next port.
      const unsigned offset = info.launcher == "torchrun" ? 1 : 0;
      if (!port || *port == 0 || *port + offset > 65535) {
        problems.malformed("MASTER_PORT", *master_port,
                           offset != 0 ? "expected a port in 1..65534 (rdmx uses MASTER_PORT+1 under torchrun)"
                                       : "expected a port in 1..65535");
      } else {
        info.store_host = bootstrap::strip_brackets(*master_addr);
        info.store_port = static_cast<std::uint16_t>(*port + offset);
      }
    }
  }

  if (problems.any()) {
    throw Error(ErrorCode::Config,
                std::string("launcher ") + launcher->display + " recognised (" + trigger_seen + " is set), but " +
                    problems.describe(),
                ErrorContext{.op = "detect_launch",
                             .hint = std::string("set the variables above as ") + launcher->display +
                                     " would; RDMX_RANK/RDMX_WORLD_SIZE/RDMX_STORE override every launcher"});
  }
  info.rank = *rank;
  info.world_size = *world_size;
  info.local_rank = local_rank.value_or(-1);
  info.local_world_size = local_world_size.value_or(-1);
  return info;
}

std::unique_ptr<Store> open_store(const std::string& address, std::chrono::milliseconds timeout) {
  LaunchInfo where;
  EnvProblems problems;
  parse_store_address("store address", address, where, problems);
  if (problems.any()) {
    throw Error(ErrorCode::InvalidArgument, "open_store: " + problems.describe(),
                ErrorContext{.op = "open_store", .hint = "give the job's RDMX_STORE (or MASTER_ADDR:MASTER_PORT)"});
  }
  if (!where.store_file.empty()) return open_file_store(where.store_file);
  return connect_tcp_store(where.store_host, where.store_port, timeout);
}

Bootstrap from_env() {
  Bootstrap joined;
  joined.info = detect_launch();
  const LaunchInfo& info = joined.info;
  core::set_current_rank(info.rank);

  if (!info.store_file.empty()) {
    joined.store = open_file_store(info.store_file);
    RDMX_INFO("rank %d/%d (launcher %s): file store %s", info.rank, info.world_size, info.launcher.c_str(),
              info.store_file.c_str());
    return joined;
  }
  if (info.store_host.empty()) {
    throw Error(ErrorCode::Config,
                "launcher " + info.launcher + " gave rank " + std::to_string(info.rank) + " of " +
                    std::to_string(info.world_size) +
                    " but no store address: RDMX_STORE is unset and MASTER_ADDR/MASTER_PORT are unset",
                ErrorContext{.op = "from_env", .hint = kStoreHint});
  }
  std::string address = bootstrap::format_host_port(info.store_host, info.store_port);
  if (info.rank == 0 && kStoreExternal.read()) {
    RDMX_INFO("rank 0 (launcher %s): the store at %s is served apart from the ranks (RDMX_STORE_EXTERNAL=1)",
              info.launcher.c_str(), address.c_str());
  } else if (info.rank == 0) {
    if (bootstrap::is_local_host(info.store_host)) {
      // A loopback store stays private to this machine; any other local
      // address is served on every interface, as ranks may reach this host
      // by another of its names.
      std::string error;
      auto resolved = bootstrap::resolve_tcp(info.store_host, info.store_port, false, error);
      bool loopback = !resolved.empty() && bootstrap::is_loopback(resolved.front().get());
      try {
        joined.server = std::make_shared<TcpStoreServer>(loopback ? info.store_host : std::string(), info.store_port);
      } catch (const Error& e) {
        bool from_master = !kStore.read();
        std::string source = from_master ? "MASTER_ADDR/MASTER_PORT" : "RDMX_STORE";
        std::string hint = e.context().hint;
        if (from_master && info.launcher == "torchrun") {
          hint =
              "under torchrun rdmx serves its store on MASTER_PORT+1 (torchrun's agent holds MASTER_PORT); that "
              "port is taken too: export RDMX_STORE=" +
              address.substr(0, address.rfind(':')) + ":<a free port>";
        }
        throw Error(e.code(),
                    "rank 0 (launcher " + info.launcher + ") cannot serve the store at " + address + " (from " +
                        source + "): " + e.message(),
                    ErrorContext{.op = "from_env", .peer_addr = address, .hint = hint});
      }
      RDMX_INFO("rank 0 (launcher %s): serving the store for %d ranks on %s", info.launcher.c_str(), info.world_size,
                address.c_str());
    } else {
      RDMX_INFO(
          "rank 0 (launcher %s): store host %s is not an address of this machine; expecting a store "
          "server there (rdmx_store)",
          info.launcher.c_str(), info.store_host.c_str());
    }
  }
  joined.store = connect_tcp_store(info.store_host, info.store_port, core::timeout());
  RDMX_INFO("rank %d/%d (launcher %s): connected to the store at %s", info.rank, info.world_size, info.launcher.c_str(),
            address.c_str());
  return joined;
}

}  // namespace rdmx
