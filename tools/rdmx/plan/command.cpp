// SPDX-License-Identifier: MIT
// rdmx plan: which fabric a training job needs. `rdmx plan --model M --nodes
// 2,4 --fabrics ib-ndr,tcp-100` prints a table per fabric and a
// recommendation, and writes JSON and an HTML report; `plan fabrics` and
// `plan models` list what it knows; `plan collective` prints the model's
// time for one collective; `plan calibrate` measures the fabric it runs on.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "plan/calibrate.hpp"
#include "plan/check.hpp"
#include "plan/planner.hpp"
#include "plan/report_page.hpp"
#include "rdmx/error.hpp"
#include "report/svg_plot.hpp"

namespace rdmx::cli {
namespace {

using namespace plan;

struct PlanOptions {
  std::string model = "resnet-50";
  std::string nodes = "2,4,8,16";
  int gpus_per_node = 8;
  std::string fabrics = "ib-ndr,roce-200,tcp-100";
  std::string fabric_file;
  std::string prices;
  double target = 0.9;
  std::string library = "nccl";
  std::string links = "equal";
  std::string sharding = "ddp";
  std::string json_out;
  std::string html_out;
  double compute_ms = -1;
  double one_gpu_rate = -1;
  double one_node_rate = -1;
  double optimizer_ms = -1;
  double batch = -1;
  double parameters = -1;
  double gradient_bytes = -1;
  double bucket_mib = -1;
  double first_bucket_mib = -1;
  std::string models_file;
  Parallelism parallel;
  int layers = 0;
  double hidden = 0;
  double seq_len = 0;
  int moe_layers = 0;
  int top_k = 0;
};

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::vector<int> parse_counts(const std::string& text, const std::string& option) {
  std::vector<int> out;
  for (const auto& item : split_list(text)) {
    try {
      std::size_t used = 0;
      const int v = std::stoi(item, &used);
      if (used != item.size() || v < 1) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      throw UsageError{option + ": '" + item + "' is not a positive count (expected a list such as 2,4,8)"};
    }
  }
  if (out.empty()) throw UsageError{option + ": no count given"};
  return out;
}

// A preset, a captured profile (a file), or a description from the options.
// --one-gpu-rate and --one-node-rate: the job's own one-node scaling.
void apply_node_rates(const PlanOptions& o, Workload& w) {
  if ((o.one_gpu_rate > 0) != (o.one_node_rate > 0)) {
    throw UsageError{"--one-gpu-rate and --one-node-rate go together: one node's throughput against one GPU's"};
  }
  if (o.one_gpu_rate <= 0) return;
  const double e = o.one_node_rate / (o.gpus_per_node * o.one_gpu_rate);
  if (e > 1.05) {
    throw UsageError{"--one-node-rate " + format_number(o.one_node_rate) + " is more than " +
                     std::to_string(o.gpus_per_node) + " GPUs at --one-gpu-rate " + format_number(o.one_gpu_rate) +
                     " (" + format_number(e * 100) + "%): check both are samples/s of the same job"};
  }
  w.one_node_efficiency = std::min(1.0, e);
  w.one_node_source = "given: one node " + format_number(o.one_node_rate) + " samples/s against " +
                      std::to_string(o.gpus_per_node) + " x " + format_number(o.one_gpu_rate);
}

Workload workload_of(const PlanOptions& o) {
  Workload w;
  const bool is_file = std::filesystem::exists(o.model);
  if (is_file) {
    w = load_captured_profile(o.model);
    if (o.batch > 0) w.samples_per_step = o.batch;
    const Parallelism& p = o.parallel;
    if (o.parameters > 0 || o.bucket_mib > 0 || o.first_bucket_mib > 0 || o.optimizer_ms >= 0 || o.sharding != "ddp" ||
        p.tensor > 1 || p.pipeline > 1 || p.expert > 1 || o.layers > 0) {
      throw UsageError{
          "--parameters, the bucket sizes, --optimizer-ms, --sharding and the model parallelism options describe a "
          "job; a captured profile has its own (its collectives keep their communicators' sizes)"};
    }
    if (o.compute_ms >= 0) {
      scale_compute(w.step, o.compute_ms / 1e3);
      w.source += "; compute scaled to " + format_number(o.compute_ms) + " ms per step";
    }
    apply_node_rates(o, w);
    return w;
  }
  Description d;
  if (o.model == "custom") {
    if (o.parameters <= 0 || o.compute_ms < 0) {
      throw UsageError{"--model custom needs --parameters and --compute-ms (and --batch for samples/s)"};
    }
    w.name = "custom";
    w.origin = "described";
    w.source = "from the command line";
  } else {
    d = preset_description(o.model, &w.source, o.models_file);
    w.name = o.model;
    w.origin = "preset";
  }
  if (o.parameters > 0) d.parameters = o.parameters;
  if (o.compute_ms >= 0) {
    d.compute_seconds = o.compute_ms / 1e3;
    d.compute_gpu.clear();  // the user's figure is for the GPUs they plan for
    w.source += "; compute per step given: " + format_number(o.compute_ms) + " ms";
  }
  if (o.optimizer_ms >= 0) {
    // It runs after the last gradient is reduced, out of the backward's time.
    const double backward_ms = d.compute_seconds * 1e3 * (1 - d.forward_share);
    if (o.optimizer_ms > backward_ms) {
      throw UsageError{"--optimizer-ms " + format_number(o.optimizer_ms) + " is more than the backward pass's " +
                       format_number(backward_ms) + " ms of the step's " + format_number(d.compute_seconds * 1e3) +
                       " ms compute: the optimizer's time is part of --compute-ms"};
    }
    d.optimizer_seconds = o.optimizer_ms / 1e3;
    w.source += "; optimizer " + format_number(o.optimizer_ms) + " ms of the compute, after the last all_reduce";
  }
  if (o.batch > 0) d.samples_per_step = o.batch;
  if (o.gradient_bytes > 0) d.gradient_bytes = o.gradient_bytes;
  if (o.bucket_mib > 0) d.bucket_bytes = o.bucket_mib * (1 << 20);
  if (o.first_bucket_mib > 0) d.first_bucket_bytes = o.first_bucket_mib * (1 << 20);
  w.parameters = d.parameters;
  w.samples_per_step = d.samples_per_step;
  w.compute_gpu = d.compute_gpu;
  w.one_node_efficiency = d.one_node_efficiency;
  w.one_node_source = d.one_node_source;
  if (o.compute_ms >= 0) w.one_node_efficiency = 0;  // the preset's figure was for its own compute
  apply_node_rates(o, w);
  d.sharding = parse_sharding(o.sharding);
  if (d.sharding != Sharding::Ddp) w.source += std::string("; sharded as ") + to_string(d.sharding);
  if (o.layers > 0) d.layers = o.layers;
  if (o.hidden > 0) d.hidden = o.hidden;
  if (o.seq_len > 0) d.seq_len = o.seq_len;
  if (o.moe_layers > 0) d.moe_layers = o.moe_layers;
  if (o.top_k > 0) d.top_k = o.top_k;
  d.parallel = o.parallel;
  const Parallelism& p = d.parallel;
  if (p.tensor > 1 || p.pipeline > 1 || p.expert > 1) {
    w.source += "; tensor x pipeline x expert parallel " + std::to_string(p.tensor) + " x " +
                std::to_string(p.pipeline) + " x " + std::to_string(p.expert) + ", " + std::to_string(p.micro_batches) +
                " micro-batches";
  }
  w.step = describe_step(d);
  return w;
}

void write_file(const std::string& path, const std::string& content, const char* what) {
  std::ofstream out(path, std::ios::trunc);
  out << content;
  if (!out) {
    throw Error(ErrorCode::System, std::string("cannot write the ") + what + " to '" + path + "'",
                {.op = "rdmx plan", .hint = "check the directory exists and is writable"});
  }
}

void run_plan(const PlanOptions& o) {
  PlanRequest rq;
  rq.workload = workload_of(o);
  rq.fabrics = split_list(o.fabrics);
  rq.nodes = parse_counts(o.nodes, "--nodes");
  rq.gpus_per_node = o.gpus_per_node;
  rq.library = parse_library(o.library);
  rq.links = parse_links(o.links);
  rq.target_efficiency = o.target;
  if (!o.prices.empty()) rq.prices = load_prices(o.prices);
  const Plan p = make_plan(rq, load_fabrics(o.fabric_file));
  std::cout << plan_text(p);
  const auto doc = plan_to_json(p);
  if (!o.json_out.empty()) {
    write_file(o.json_out, doc.dump(2) + "\n", "plan");
    std::cout << "wrote " << o.json_out << "\n";
  }
  if (!o.html_out.empty()) {
    write_file(o.html_out, render_plan_html(doc), "report");
    std::cout << "wrote " << o.html_out << "\n";
  }
}

void list_fabrics(const std::string& fabric_file, bool as_json) {
  if (as_json) {
    if (fabric_file.empty()) {
      std::cout << builtin_fabrics_text();
    } else {
      nlohmann::json doc;
      for (const auto& f : load_fabrics(fabric_file)) doc["fabrics"][f.name] = fabric_to_json(f);
      std::cout << doc.dump(2) << "\n";
    }
    return;
  }
  const auto fabrics = load_fabrics(fabric_file);
  // The name column as wide as the longest name, so a file's long names
  // keep the columns aligned.
  int width = 12;
  for (const auto& f : fabrics) width = std::max(width, static_cast<int>(f.name.size()));
  std::printf("%-*s %9s %9s %6s %5s %9s  %s\n", width, "fabric", "lat_us", "Gbit/s", "NICs", "GDR", "intra_GB/s",
              "description");
  for (const auto& f : fabrics) {
    std::printf("%-*s %9.2f %9.1f %6d %5s %9.1f  %s\n", width, f.name.c_str(), f.latency_us, f.nic_gbit * f.efficiency,
                f.nics_per_node, f.gpudirect ? "yes" : "no", f.intra_gb_s, f.description.c_str());
  }
  std::printf(
      "(Gbit/s: one NIC's line rate times its efficiency; rdmx plan fabrics --json prints the file with "
      "every value's source)\n");
}

void list_models(const std::string& models_file) {
  const auto names = preset_names(models_file);
  int width = 14;
  for (const auto& name : names) width = std::max(width, static_cast<int>(name.size()));
  for (const auto& name : names) {
    std::string source;
    const Description d = preset_description(name, &source, models_file);
    std::printf("%-*s %8.1fM parameters, %7.1f ms compute per step, batch %g per GPU\n    %s\n", width, name.c_str(),
                d.parameters / 1e6, d.compute_seconds * 1e3, d.samples_per_step, source.c_str());
  }
}

// --claim FABRIC=SAMPLES_PER_S, each.
std::vector<Claim> parse_claims(const std::vector<std::string>& texts) {
  std::vector<Claim> out;
  for (const auto& text : texts) {
    const auto eq = text.find('=');
    char* end = nullptr;
    const double v = eq == std::string::npos ? 0 : std::strtod(text.c_str() + eq + 1, &end);
    if (eq == std::string::npos || eq == 0 || end == text.c_str() + eq + 1 || *end != '\0' || !(v > 0)) {
      throw UsageError{"--claim '" + text + "': expected FABRIC=SAMPLES_PER_S, e.g. ib-ndr=250000"};
    }
    out.push_back({text.substr(0, eq), v});
  }
  return out;
}

void run_check(const PlanOptions& o, const std::vector<std::string>& claim_texts, bool as_json) {
  const std::vector<Claim> claims = parse_claims(claim_texts);
  PlanRequest rq;
  rq.workload = workload_of(o);
  rq.nodes = parse_counts(o.nodes, "--nodes");
  if (rq.nodes.size() != 1) throw UsageError{"rdmx plan check takes one node count (--nodes N)"};
  rq.gpus_per_node = o.gpus_per_node;
  rq.library = parse_library(o.library);
  const auto checks = check_claims(rq, load_fabrics(o.fabric_file), claims);
  if (as_json) {
    std::cout << checks_to_json(rq, checks).dump(2) << "\n";
  } else {
    std::cout << checks_text(rq, checks);
  }
}

struct CollectiveOptions {
  std::string op = "all_reduce";
  std::string sizes = "1M..256M";
  int nodes = 2;
  int gpus_per_node = 1;
  std::string fabric;
  std::string fabric_file;
  std::string library = "nccl";
  bool json = false;
};

void run_collective(const CollectiveOptions& o) {
  Collective op;
  if (!parse_collective(o.op, &op)) {
    throw UsageError{"--op: '" + o.op +
                     "' is not all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all or send_recv"};
  }
  const auto fabrics = load_fabrics(o.fabric_file);
  const Fabric& f = find_fabric(fabrics, o.fabric.empty() ? fabrics.front().name : o.fabric);
  const Cluster cluster{o.nodes, o.gpus_per_node};
  const Library lib = parse_library(o.library);
  if (!o.json) {
    std::printf("# %s on %s, %d x %d ranks, as %s runs it\n%12s %8s %8s %12s %10s %10s\n", o.op.c_str(), f.name.c_str(),
                o.nodes, o.gpus_per_node, to_string(lib), "size", "algo", "proto", "time_us", "algbw", "busbw");
  }
  for (const std::size_t bytes : parse_size_list(o.sizes, "--sizes", kModelledSizeMax)) {
    const Estimate e = estimate(f, cluster, op, static_cast<double>(bytes), lib);
    const double algbw = e.seconds > 0 ? bytes / e.seconds / 1e9 : 0;
    const double p = cluster.ranks();
    const double factor = bus_factor(op, static_cast<int>(p));
    if (o.json) {
      std::cout << nlohmann::json{{"op", o.op},
                                  {"fabric", f.name},
                                  {"nodes", o.nodes},
                                  {"ranks_per_node", o.gpus_per_node},
                                  {"bytes", bytes},
                                  {"algo", e.algo},
                                  {"protocol", e.protocol},
                                  {"library", to_string(lib)},
                                  {"time_us", e.seconds * 1e6},
                                  {"algbw_gb_s", algbw},
                                  {"busbw_gb_s", algbw * factor}}
                       .dump()
                << "\n";
    } else {
      std::printf("%12zu %8s %8s %12.1f %10.3f %10.3f\n", bytes, e.algo.c_str(),
                  e.protocol.empty() ? "-" : e.protocol.c_str(), e.seconds * 1e6, algbw, algbw * factor);
    }
  }
}

// Bad arguments end as CLI11's usage errors (exit status 2).
template <typename F>
std::function<void()> with_usage(const char* where, F body) {
  return [where, body] {
    try {
      body();
    } catch (const UsageError& e) {
      throw CLI::ValidationError(where, e.message);
    }
  };
}

}  // namespace

void register_plan(CLI::App& root) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* plan = root.add_subcommand(
      "plan",
      "Which fabric a training job needs: step time, throughput, scaling efficiency and cost on InfiniBand, "
      "RoCE and Ethernet, from a model preset, a description or a profile captured with RDMX_PROFILE");
  plan->require_subcommand(0, 1);
  plan->add_option("--model", o->model,
                   "a preset (rdmx plan models), 'custom' with --parameters and --compute-ms, or a profile file "
                   "written under RDMX_PROFILE")
      ->capture_default_str();
  plan->add_option("--nodes", o->nodes, "node counts, a comma list")->capture_default_str();
  plan->add_option("--gpus-per-node", o->gpus_per_node, "GPUs (ranks) per node")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  plan->add_option("--fabrics", o->fabrics, "fabrics to compare, a comma list (rdmx plan fabrics)")
      ->capture_default_str();
  plan->add_option("--fabric-file", o->fabric_file,
                   "fabric profiles to use instead of the built-in ones (rdmx plan fabrics --json writes a start; "
                   "rdmx plan calibrate writes a measured one)");
  plan->add_option("--prices", o->prices,
                   "hourly prices: {\"node_per_hour\": N, \"fabric_per_node_per_hour\": {fabric: N}}");
  plan->add_option("--target-efficiency", o->target, "scaling efficiency the recommended fabric must keep")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  plan->add_option("--library", o->library,
                   "whose collectives to model: nccl (what PyTorch runs on GPUs), rdmx, or nccl-ring (NCCL before "
                   "2.4: rings only)")
      ->check(CLI::IsMember({"rdmx", "nccl", "nccl-ring"}))
      ->capture_default_str();
  plan->add_option("--links", o->links,
                   "the links the fabrics are compared on: equal (the first fabric's NICs for all, so only the "
                   "transport differs), as-built (each as profiled), or NICSxGBIT (e.g. 8x400)")
      ->capture_default_str();
  plan->add_option("--sharding", o->sharding,
                   "how data parallelism shares the model: ddp, zero1, zero2, zero3 (fsdp: FSDP's full sharding, "
                   "units of --bucket-mib)")
      ->check(CLI::IsMember({"ddp", "zero1", "zero2", "zero3", "fsdp"}))
      ->capture_default_str();
  plan->add_option("--one-gpu-rate", o->one_gpu_rate,
                   "samples/s of the job on one GPU; with --one-node-rate, the loss inside a node besides the "
                   "network (default: a published figure, which the report names)")
      ->check(CLI::PositiveNumber);
  plan->add_option("--one-node-rate", o->one_node_rate, "samples/s of the job on one node of --gpus-per-node GPUs")
      ->check(CLI::PositiveNumber);
  plan->add_option("--json", o->json_out, "write the plan as JSON to this file");
  plan->add_option("--html", o->html_out, "write the report page (self-contained HTML) to this file");
  plan->add_option("--compute-ms", o->compute_ms,
                   "compute per step per GPU, ms (your measurement); with a captured profile, its compute gaps "
                   "scaled to this total (a faster GPU, or the job measured elsewhere)")
      ->check(CLI::Range(0.0, 1e7));
  plan->add_option("--optimizer-ms", o->optimizer_ms,
                   "of the compute per step, the optimizer's ms: it runs after the last gradient is reduced, so "
                   "no communication overlaps it (default 0)")
      ->check(CLI::Range(0.0, 1e7));
  plan->add_option("--batch", o->batch, "samples per step per GPU")->check(CLI::Range(1e-9, 1e9));
  plan->add_option("--parameters", o->parameters, "parameter count")->check(CLI::Range(1.0, 1e13));
  plan->add_option("--gradient-bytes", o->gradient_bytes, "bytes per gradient element: 4 (fp32) or 2 (fp16, bf16)")
      ->check(CLI::Range(1.0, 8.0));
  plan->add_option("--bucket-mib", o->bucket_mib,
                   "gradient bucket size, MiB (DDP's bucket_cap_mb, default 25; Horovod's fusion buffer, 64)")
      ->check(CLI::Range(1.0 / 1024, 1048576.0));
  plan->add_option("--first-bucket-mib", o->first_bucket_mib, "the first bucket's size, MiB (DDP: 1)")
      ->check(CLI::Range(1.0 / 1024, 1048576.0));
  plan->add_option("--tensor-parallel", o->parallel.tensor,
                   "GPUs of a tensor-parallel group, inside a node: two all_reduces of activations per layer each way")
      ->check(CLI::PositiveNumber);
  plan->add_option("--pipeline-parallel", o->parallel.pipeline,
                   "pipeline stages (1F1B): sends across stage boundaries and the bubble")
      ->check(CLI::PositiveNumber);
  plan->add_option("--micro-batches", o->parallel.micro_batches, "micro-batches per step through the pipeline")
      ->check(CLI::PositiveNumber);
  plan->add_option("--expert-parallel", o->parallel.expert,
                   "GPUs of an expert-parallel group (mixture of experts): two all_to_alls per expert layer each way")
      ->check(CLI::PositiveNumber);
  plan->add_option("--layers", o->layers, "transformer layers (with model parallelism)")->check(CLI::PositiveNumber);
  plan->add_option("--hidden", o->hidden, "hidden size (with model parallelism)")->check(CLI::PositiveNumber);
  plan->add_option("--seq-len", o->seq_len, "tokens per sample (with model parallelism)")->check(CLI::PositiveNumber);
  plan->add_option("--moe-layers", o->moe_layers, "layers with experts (default: all, with --expert-parallel)")
      ->check(CLI::PositiveNumber);
  plan->add_option("--top-k", o->top_k, "experts each token is sent to (default 2)")->check(CLI::PositiveNumber);
  plan->add_option("--models-file", o->models_file,
                   "presets from this file (tools/rdmx/plan/data/models.json's form) instead of the built-in ones");

  auto fabrics_json = std::make_shared<bool>(false);
  auto fabrics_file = std::make_shared<std::string>();
  CLI::App* fabrics = plan->add_subcommand("fabrics", "the fabric profiles and their sources");
  fabrics->add_flag("--json", *fabrics_json, "print the profile file (to edit and pass as --fabric-file)");
  fabrics->add_option("--fabric-file", *fabrics_file, "list this file's profiles instead of the built-in ones");
  fabrics->callback([fabrics_json, fabrics_file] { list_fabrics(*fabrics_file, *fabrics_json); });

  auto models_file = std::make_shared<std::string>();
  CLI::App* models = plan->add_subcommand("models", "the model presets and the sources of their numbers");
  models->add_option("--models-file", *models_file, "list this file's presets instead of the built-in ones");
  models->callback([models_file] { list_models(*models_file); });

  auto c = std::make_shared<CollectiveOptions>();
  CLI::App* coll = plan->add_subcommand("collective", "the model's time for one collective, nccl-tests columns");
  coll->add_option("--op", c->op, "all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all or send_recv")
      ->capture_default_str();
  coll->add_option("--sizes", c->sizes, "sizes: a comma list or LO..HI, up to 1024G (modelled, never allocated)")
      ->capture_default_str();
  coll->add_option("--nodes", c->nodes, "nodes")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  coll->add_option("--gpus-per-node", c->gpus_per_node, "ranks per node")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  coll->add_option("--fabric", c->fabric, "fabric name (default: the file's first)");
  coll->add_option("--fabric-file", c->fabric_file, "fabric profiles instead of the built-in ones");
  coll->add_option("--library", c->library, "nccl, rdmx or nccl-ring")
      ->check(CLI::IsMember({"rdmx", "nccl", "nccl-ring"}))
      ->capture_default_str();
  coll->add_flag("--json", c->json, "one JSON object per size");
  coll->callback(with_usage("plan collective", [c] { run_collective(*c); }));

  register_plan_calibrate(*plan);

  auto claims = std::make_shared<std::vector<std::string>>();
  auto check_json = std::make_shared<bool>(false);
  CLI::App* check = plan->add_subcommand(
      "check",
      "the advisor backwards: the network bandwidth a claimed (or measured) throughput implies on each fabric, "
      "and claims above the compute ceiling or beyond the stated links (takes plan's --model, --nodes N, ...)");
  check->fallthrough();
  check->add_option("--claim", *claims, "FABRIC=SAMPLES_PER_S, once per fabric")->required();
  check->add_flag("--json", *check_json, "print the checks as JSON");
  check->callback(with_usage("plan check", [o, claims, check_json] { run_check(*o, *claims, *check_json); }));

  plan->callback(with_usage("plan", [plan, o] {
    if (plan->get_subcommands().empty()) run_plan(*o);
  }));
}

}  // namespace rdmx::cli
