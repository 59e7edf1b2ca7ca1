// SPDX-License-Identifier: MIT
// rdmx plan calibrate: measures the fabric this job runs on (latency of a
// collective step and bandwidth between nodes and inside one, reduction
// rate) and writes a fabric profile the model reads like the built-in ones.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace rdmx::cli {

void register_plan_calibrate(CLI::App& plan);

// rdmx plan calibrate --from-nccl-tests: a profile fitted to a published or
// measured nccl-tests curve instead of one measured by this job's ranks.
struct CalibrateLogOptions {
  std::string log;                   // the nccl-tests output
  std::string like = "ib-ndr";       // the profile whose other fields the fit keeps
  std::string fabric_file;           // where `like` is, if not built in
  std::string op;                    // when the log does not say
  int nodes = 0, gpus_per_node = 0;  // when the log has no "Rank ... on HOST" lines
  int nics = 0;                      // NICs per node of the measured cluster (0: as `like`)
  double nic_gbit = 0;               // their line rate (0: as `like`)
  std::string transport;             // rdma or socket (empty: as `like`)
  std::string gpu;                   // when the log prints none
  std::string library = "nccl";
  std::string name = "fitted";
  std::string description;
  std::string out = "fabric.json";
};
void calibrate_from_log(const CalibrateLogOptions& options);

}  // namespace rdmx::cli
