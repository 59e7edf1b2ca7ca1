// SPDX-License-Identifier: MIT
// What an nccl-tests run printed (all_reduce_perf and its siblings), read
// back: the collective, the ranks and hosts, the GPU, and each size's
// out-of-place time and bus bandwidth; and a fabric profile fitted to such
// a curve through the advisor's model (rdmx plan calibrate
// --from-nccl-tests, docs/ADVISOR.md "Calibration").
#pragma once

#include <string>
#include <vector>

#include "plan/cost_model.hpp"
#include "plan/fabric.hpp"

namespace rdmx::cli::plan {

struct CurvePoint {
  double bytes = 0;
  double seconds = 0;  // out-of-place time (the median where the log repeats a size)
  double busbw_gb_s = 0;
};

struct NcclTestsLog {
  std::string collective;          // "all_reduce", ...; empty when the log does not say
  int ranks = 0;                   // from the "Rank N ... on HOST device" lines; 0 when absent
  int nodes = 0;                   // distinct hosts among them
  std::string gpu;                 // as printed ("NVIDIA H100 80GB HBM3")
  std::vector<CurvePoint> points;  // by size, ascending
};

// Reads the text of an nccl-tests run: with or without the root and #wrong
// columns (older versions print "error"), prefixed by mpirun's
// --tag-output or not, one or both of the out-of-place and in-place
// groups. Throws rdmx::Error naming `origin` when no measurement is found.
NcclTestsLog parse_nccl_tests_log(const std::string& text, const std::string& origin);

// What `rdmx perf coll --json` printed (docs/schemas/perf_coll.schema.json),
// as the same curve: the out-of-place rows of the run of `collective` (or
// of its only collective when empty). It names no hosts: nodes stay 0.
// Throws rdmx::Error naming `origin` for another document or a missing run.
NcclTestsLog parse_perf_coll_json(const std::string& text, const std::string& origin, const std::string& collective);

struct CurveFit {
  Fabric fabric;                          // `like` with the fitted fields and their sources
  std::vector<double> predicted_seconds;  // per point
  double rms_error = 0;                   // of log(predicted / measured), as a fraction
  std::string fitted;                     // which fields were fitted
};

// Fits the fields the curve determines, through `library`'s model of `op`
// on `layout`: across nodes the network's efficiency (a node's bandwidth)
// and the latency of a step between nodes; inside one node, the bandwidth
// between GPUs. The rest stays as in `like`.
CurveFit fit_curve(const Fabric& like, const Cluster& layout, Collective op, const std::vector<CurvePoint>& points,
                   Library library);

}  // namespace rdmx::cli::plan
