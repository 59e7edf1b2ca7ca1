// SPDX-License-Identifier: MIT
// rdmx plan calibrate --from-nccl-tests LOG: a fabric profile fitted to
// what nccl-tests measured on a real cluster, through the advisor's model
// of the library that ran (docs/ADVISOR.md, "Calibration"). No rank runs.
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "plan/calibrate.hpp"
#include "plan/nccl_tests_log.hpp"
#include "rdmx/error.hpp"
#include "report/svg_plot.hpp"

namespace rdmx::cli {

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw Error(
        ErrorCode::NotFound, "cannot read the nccl-tests log '" + path + "'",
        {.op = "plan calibrate --from-nccl-tests", .hint = "save the run's output to a file and give its path"});
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// "NVIDIA H100 80GB HBM3" -> "H100"; empty when no model name is found.
std::string gpu_model(const std::string& printed) {
  static const std::regex model(R"(\b((GB|GH|[ABHLPVKT])\d{1,3}[A-Z]?)\b)");
  std::smatch m;
  return std::regex_search(printed, m, model) ? m[1].str() : std::string();
}

}  // namespace

void calibrate_from_log(const CalibrateLogOptions& o) {
  using namespace plan;
  // An nccl-tests log, or rdmx perf coll's JSON (a document, not a log).
  const std::string text = read_text(o.log);
  const auto first = text.find_first_not_of(" \t\r\n");
  const NcclTestsLog log = first != std::string::npos && text[first] == '{' ? parse_perf_coll_json(text, o.log, o.op)
                                                                            : parse_nccl_tests_log(text, o.log);
  Collective op = Collective::AllReduce;
  const std::string op_name = !o.op.empty() ? o.op : log.collective;
  if (op_name.empty() || !parse_collective(op_name, &op)) {
    throw Error(ErrorCode::InvalidArgument,
                o.log + ": " +
                    (op_name.empty() ? "the log does not say which collective it ran"
                                     : "the model does not cost '" + op_name + "'"),
                {.op = "plan calibrate --from-nccl-tests",
                 .hint = "--op all_reduce, all_gather, reduce_scatter, broadcast or reduce"});
  }
  const int nodes = o.nodes > 0 ? o.nodes : log.nodes;
  const int ranks = o.gpus_per_node > 0 && nodes > 0 ? nodes * o.gpus_per_node : log.ranks;
  if (nodes < 1 || ranks < nodes || ranks % nodes != 0) {
    throw Error(ErrorCode::InvalidArgument,
                o.log + ": the log's ranks and hosts (" + std::to_string(log.ranks) + " ranks on " +
                    std::to_string(log.nodes) + " hosts) give no layout of equal nodes",
                {.op = "plan calibrate --from-nccl-tests", .hint = "give --nodes and --gpus-per-node"});
  }
  const Cluster layout{nodes, ranks / nodes};
  const Library library = parse_library(o.library);
  Fabric like = find_fabric(load_fabrics(o.fabric_file), o.like);
  if (o.nics > 0) like.nics_per_node = o.nics;
  if (o.nic_gbit > 0) like.nic_gbit = o.nic_gbit;
  if (!o.transport.empty()) like.transport = o.transport;
  const std::string gpu = !o.gpu.empty() ? o.gpu : gpu_model(log.gpu);
  if (!gpu.empty()) like.gpu = gpu;
  const CurveFit fit = fit_curve(like, layout, op, log.points, library);
  Fabric f = fit.fabric;
  f.name = o.name;
  const std::string curve = o.log + " (" + std::string(to_string(op)) + ", " + std::to_string(layout.nodes) + " x " +
                            std::to_string(layout.ranks_per_node) + ", " + format_bytes(log.points.front().bytes) +
                            " to " + format_bytes(log.points.back().bytes) + ")";
  f.description = o.description.empty() ? "fitted to " + curve : o.description;
  const std::string how = "fitted to " + curve + " through the " + std::string(to_string(library)) +
                          " model: rms error " + format_number(fit.rms_error * 100) + "%";
  f.sources["efficiency"] = layout.nodes > 1 ? how : like.sources["efficiency"];
  f.sources["latency_us"] = layout.nodes > 1 ? how : like.sources["latency_us"];
  if (layout.nodes == 1) f.sources["intra_gb_s"] = how;
  f.sources["gpu"] = gpu.empty() ? "as " + o.like : "the log's GPU: " + log.gpu;
  std::printf("# %s: %s on %d x %d ranks, %s; fitted %s of %s\n", o.log.c_str(), to_string(op), layout.nodes,
              layout.ranks_per_node, log.gpu.empty() ? "GPU not printed" : log.gpu.c_str(), fit.fitted.c_str(),
              o.like.c_str());
  std::printf("%14s %14s %14s %10s\n", "size", "busbw", "predicted", "ratio");
  const double p = layout.ranks();
  const double factor = bus_factor(op, static_cast<int>(p));
  for (std::size_t i = 0; i < log.points.size(); ++i) {
    const auto& pt = log.points[i];
    const double predicted = pt.bytes / fit.predicted_seconds[i] / 1e9 * factor;
    const double measured = pt.bytes / pt.seconds / 1e9 * factor;
    std::printf("%14.0f %14.3f %14.3f %10.3f\n", pt.bytes, measured, predicted, predicted / measured);
  }
  std::printf("fabric %s: efficiency %.3f of %d x %g Gbit/s, latency %.2f us, rms error %.1f%%\n", f.name.c_str(),
              f.efficiency, f.nics_per_node, f.nic_gbit, f.latency_us, fit.rms_error * 100);
  nlohmann::json doc;
  doc["fabrics"][f.name] = fabric_to_json(f);
  std::ofstream out(o.out, std::ios::trunc);
  out << doc.dump(2) << "\n";
  if (!out) {
    throw Error(ErrorCode::System, "cannot write the fabric profile to '" + o.out + "'",
                {.op = "plan calibrate", .hint = "check the directory exists and is writable"});
  }
  std::printf("wrote %s\n", o.out.c_str());
}

}  // namespace rdmx::cli
