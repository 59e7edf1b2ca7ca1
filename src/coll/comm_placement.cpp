// SPDX-License-Identifier: MIT
#include "coll/comm_placement.hpp"

#include "coll/algorithms.hpp"
#include "coll/comm_memory.hpp"
#include "coll/settings.hpp"
#include "services/config.hpp"
#include "services/log.hpp"
#include "services/settings.hpp"

namespace rdmx::coll {
namespace {

constexpr core::TextSetting kHostId{"RDMX_HOSTID", "unset",
                                    "this rank's host identity: ranks with the same value count as one host for the "
                                    "hierarchical algorithms (unset: host name and boot id)"};
RDMX_SETTING(kHostId);

}  // namespace

CommPlacement::CommPlacement(const GatherAll& gather, const std::string& tag, int rank, int size,
                             const std::string& device)
    : tag_(tag), rank_(rank), size_(size) {
  // Where everyone lives: host name plus boot id, so containers sharing a
  // name are told apart (RDMX_HOSTID overrides it, as NCCL_HOSTID does).
  // The boot id also says which ranks share this machine's cores, whatever
  // RDMX_HOSTID or a network namespace makes of their hosts.
  const RankWhere mine = RankWhere::here(kHostId.read(), device);
  const std::vector<std::string> published =
      gather(tag_ + "/hosts", mine.encode(), "placement", core::deadline_after(core::timeout()));
  std::vector<std::string> identities(static_cast<std::size_t>(size_)), names(static_cast<std::size_t>(size_));
  for (int p = 0; p < size_; ++p) {
    const RankWhere where = p == rank_ ? mine : RankWhere::decode(published[static_cast<std::size_t>(p)]);
    everyone_.push_back(where);
    identities[static_cast<std::size_t>(p)] = where.identity;
    names[static_cast<std::size_t>(p)] = where.name;
    if (where.boot_id == mine.boot_id) ++sharing_cores_;
    devices_.push_back(where.device +
                       (where.numa_node >= 0 ? " (NUMA node " + std::to_string(where.numa_node) + ")" : ""));
  }
  layout_ = make_host_layout(identities, names);
  placement_.host = host_name();
  placement_.local_rank = layout_.local_of[static_cast<std::size_t>(rank_)];
  placement_.local_size = static_cast<int>(
      layout_.ranks[static_cast<std::size_t>(layout_.host_of[static_cast<std::size_t>(rank_)])].size());
}

void CommPlacement::require_buffers_fit() const { coll::require_buffers_fit(everyone_, rank_); }

LinksConfig CommPlacement::links_config_with_waits() {
  LinksConfig config = links_config();
  const std::size_t cpus = online_cpus();
  config.yield_when_waiting = static_cast<std::size_t>(sharing_cores_) > cpus;
  const WaitPolicy waits = wait_policy(sharing_cores_, cpus);
  config.spin = waits.spin;
  waits_ = "spin " + std::to_string(waits.spin.count()) + " us, then sleep; " + waits.why +
           (config.yield_when_waiting ? "; more ranks than cores: spinning waiters yield" : "");
  return config;
}

void CommPlacement::log_created() const {
  RDMX_INFO("communicator '%s': rank %d of %d, local rank %d of %d on %s; waits %s", tag_.c_str(), rank_, size_,
            placement_.local_rank, placement_.local_size, placement_.host.c_str(), waits_.c_str());
  if (rank_ == 0) {
    RDMX_INFO("communicator '%s': topology %s; hierarchical rings %s; trees across hosts %s; devices %s", tag_.c_str(),
              layout_.describe().c_str(), layout_.describe_rings().c_str(),
              describe_host_trees(layout_.hosts()).c_str(), describe_devices().c_str());
  }
}

std::string CommPlacement::describe() const {
  return "hosts: " + layout_.describe() + "\nrings: " + layout_.describe_rings() +
         "\ntrees across hosts (small all_reduce, double binary tree): " + describe_host_trees(layout_.hosts()) +
         "\nwaits (rank " + std::to_string(rank_) + "): " + waits_ + "\ndevices: " + describe_devices();
}

std::string CommPlacement::describe_devices() const {
  std::string out;
  for (std::size_t h = 0; h < layout_.ranks.size(); ++h) {
    out += (h == 0 ? "" : "; ") + layout_.names[h] + ":";
    for (int r : layout_.ranks[h]) {
      out += " " + std::to_string(r) + " " + devices_[static_cast<std::size_t>(r)] + ",";
    }
    out.pop_back();
  }
  return out;
}

}  // namespace rdmx::coll
