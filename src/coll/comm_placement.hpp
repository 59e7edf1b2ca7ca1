// SPDX-License-Identifier: MIT
// Where a communicator's ranks run, as it learns at creation: every rank
// publishes its RankWhere (rank_placement.hpp) in the store and reads the
// others', and from them come the host layout the hierarchical algorithms
// run on, this rank's RankPlacement, and how its collectives wait given how
// many ranks share its machine's cores.
#pragma once

#include <string>
#include <vector>

#include "coll/host_layout.hpp"
#include "coll/links.hpp"
#include "coll/rank_placement.hpp"
#include "rdmx/bootstrap.hpp"
#include "rdmx/comm.hpp"

namespace rdmx::coll {

class CommPlacement {
 public:
  // Collective over the ranks: publishes this rank's RankWhere under `tag`
  // and reads every other rank's. `device`: Device::name() of the device
  // the communicator's links open.
  // `gather` exchanges what each rank says of itself (bootstrap/store_gather.hpp).
  CommPlacement(const GatherAll& gather, const std::string& tag, int rank, int size, const std::string& device);

  const HostLayout& layout() const noexcept { return layout_; }
  const RankPlacement& placement() const noexcept { return placement_; }

  // Throws, alike on every rank, when the collectives' buffers do not fit
  // the memory of a host (comm_memory.hpp).
  void require_buffers_fit() const;
  // The links' configuration (settings.hpp) with this machine's waits:
  // how long waiters spin, and whether they yield when ranks outnumber cores.
  LinksConfig links_config_with_waits();

  // The INFO lines of a created communicator: this rank's place, and on
  // rank 0 the topology.
  void log_created() const;
  // Communicator::describe_topology().
  std::string describe() const;

 private:
  // Each host's ranks with their devices (the NIC a rank's network
  // traffic leaves by) and NUMA nodes.
  std::string describe_devices() const;

  std::string tag_;
  int rank_;
  int size_;
  std::vector<RankWhere> everyone_;
  int sharing_cores_ = 0;  // ranks on this machine's cores (same boot id), this one included
  HostLayout layout_;
  RankPlacement placement_;
  std::vector<std::string> devices_;  // each rank's device and NUMA node, for describe()
  std::string waits_;                 // how this rank's collectives wait, and why
};

}  // namespace rdmx::coll
