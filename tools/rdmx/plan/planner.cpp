// SPDX-License-Identifier: MIT
#include "plan/planner.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>

#include "plan/doc_fields.hpp"
#include "plan/validation.hpp"
#include "rdmx/error.hpp"

namespace rdmx::cli::plan {
namespace {

// What a fabric costs for the work, lower is better. With prices, what a
// million samples cost on it (the nodes' price and the fabric's, over the
// throughput it reaches), averaged over the node counts in scope: a dearer
// fabric that trains faster can cost less per sample. Without prices, the
// profile's relative cost of the fabric alone; nullopt when a row in scope
// has no throughput to price.
std::optional<double> ranking_cost(const Plan& plan, const Fabric& f, int nodes) {
  if (!plan.request.prices) return f.relative_cost;
  double sum = 0;
  int count = 0;
  for (const PlanRow& row : plan.rows) {
    if (row.fabric != f.name || (nodes != 0 && row.cluster.nodes != nodes)) continue;
    if (!row.cost_per_million_samples) return std::nullopt;
    sum += *row.cost_per_million_samples;
    ++count;
  }
  if (count == 0) return std::nullopt;
  return sum / count;
}

Recommendation recommend(const Plan& plan, int nodes) {
  Recommendation r;
  r.nodes = nodes;
  const Fabric* best = nullptr;
  double best_cost = 0;
  for (const Fabric& f : plan.fabrics) {
    bool meets = true;
    for (const PlanRow& row : plan.rows) {
      if (row.fabric != f.name || (nodes != 0 && row.cluster.nodes != nodes)) continue;
      if (row.efficiency + 1e-9 < plan.request.target_efficiency) meets = false;
    }
    const std::optional<double> c = ranking_cost(plan, f, nodes);
    if (!meets || !c) continue;
    if (best == nullptr || *c < best_cost) {
      best = &f;
      best_cost = *c;
    }
  }
  const std::string scope = nodes == 0 ? "at every node count asked" : "at " + std::to_string(nodes) + " nodes";
  const std::string target = format_printf("%.0f%%", plan.request.target_efficiency * 100);
  // The recommended fabric's margin: its lowest efficiency in scope.
  std::string margin;
  if (best != nullptr) {
    const PlanRow* lowest = nullptr;
    for (const PlanRow& row : plan.rows) {
      if (row.fabric != best->name || (nodes != 0 && row.cluster.nodes != nodes)) continue;
      if (lowest == nullptr || row.efficiency < lowest->efficiency) lowest = &row;
    }
    if (lowest != nullptr) {
      margin = "; its lowest is " + format_printf("%.1f%%", lowest->efficiency * 100) + " at " +
               std::to_string(lowest->cluster.nodes) + " nodes, " +
               format_printf("%.1f", (lowest->efficiency - plan.request.target_efficiency) * 100) +
               " points above the target";
    }
  }
  if (best == nullptr) {
    r.why = "no fabric reaches " + target + " scaling efficiency " + scope;
  } else if (plan.request.prices) {
    r.fabric = best->name;
    r.why = fabric_label(*best) + " costs the least per 1M samples (" + plan.request.prices->currency + " " +
            format_printf("%.3f", best_cost) + (nodes == 0 ? ", the mean over the node counts" : "") +
            ", by the price file) of the fabrics that keep " + target + " scaling efficiency " + scope + margin;
  } else {
    r.fabric = best->name;
    r.why = fabric_label(*best) + " is the cheapest fabric that keeps " + target + " scaling efficiency " + scope +
            " (by the profiles' relative cost of the fabric; give --prices to rank by cost per sample)" + margin;
  }
  return r;
}

}  // namespace

std::string format_printf(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

Links parse_links(const std::string& text) {
  Links l;
  if (text == "equal") return l;
  if (text == "as-built") {
    l.mode = Links::AsBuilt;
    return l;
  }
  const auto x = text.find('x');
  char* end = nullptr;
  const long nics = x == std::string::npos ? 0 : std::strtol(text.c_str(), &end, 10);
  const bool nics_ok = x != std::string::npos && end == text.c_str() + x && nics >= 1 && nics <= 64;
  const double gbit = nics_ok ? std::strtod(text.c_str() + x + 1, &end) : 0;
  const bool gbit_ok = nics_ok && gbit > 0 && gbit <= 1e5 && (*end == '\0' || (end[0] == 'G' && end[1] == '\0'));
  if (!gbit_ok) {
    throw Error(ErrorCode::InvalidArgument, "--links '" + text + "': expected equal, as-built or NICSxGBIT",
                {.op = "rdmx plan", .hint = "e.g. --links 8x400 (eight 400 Gbit/s NICs per node)"});
  }
  l.mode = Links::Given;
  l.nics = static_cast<int>(nics);
  l.nic_gbit = gbit;
  return l;
}

std::string to_string(const Links& l) {
  if (l.mode == Links::Equal) return "equal";
  if (l.mode == Links::AsBuilt) return "as-built";
  return std::to_string(l.nics) + "x" + format_printf("%g", l.nic_gbit) + "G";
}

Prices load_prices(const std::string& path) {
  const auto doc = read_json_file(path, "price file");
  const DocPlace place{path, "prices"};
  Prices p;
  p.currency = text_field_or(doc, place, "currency", "USD");
  p.node_per_hour = number_field(doc, place, "node_per_hour", 0, 1e9);
  p.source = text_field_or(doc, place, "source", "");
  if (!doc.contains("fabric_per_node_per_hour") || !doc["fabric_per_node_per_hour"].is_object()) {
    bad_field(place, "fabric_per_node_per_hour", "must be an object of fabric: price per node per hour");
  }
  for (const auto& [name, v] : doc["fabric_per_node_per_hour"].items()) {
    p.fabric_per_node_per_hour[name] = number_field(doc["fabric_per_node_per_hour"], place, name, 0, 1e9);
  }
  return p;
}

namespace {

// What the rows' links are, for the header.
std::string links_text(const Plan& plan) {
  const Links& l = plan.request.links;
  if (l.mode == Links::AsBuilt) return "each fabric as profiled (--links as-built): NICs differ as well as transport";
  const Fabric& f = plan.fabrics.front();
  char text[160];
  std::snprintf(text, sizeof text, "every fabric on %d x %g Gbit/s per node", f.nics_per_node, f.nic_gbit);
  return std::string(text) +
         (l.mode == Links::Equal ? " (those of " + plan.request.fabrics.front() +
                                       ", the first asked; --links as-built compares them as "
                                       "profiled)"
                                 : " (--links " + to_string(l) + ")") +
         ": only the transport differs";
}

// `f` as one group sees it while the node's other groups use the network
// at once: its share of the links, and the socket transport's share as
// for all the node's GPUs.
Fabric sharing(const Fabric& f, const GroupPlacement& at, const Cluster& job) {
  Fabric out = f;
  const double socket = f.socket_share(job.ranks_per_node) / f.socket_share(at.cluster.ranks_per_node);
  out.efficiency *= at.net_share * socket;
  out.staging_gb_s *= at.net_share;
  return out;
}

// A row as the model costs it: the step replayed with each collective's
// time on `f`, before any loss besides the network.
PlanRow model_row(const PlanRequest& request, const Fabric& f, int nodes) {
  PlanRow row;
  row.fabric = f.name;
  row.cluster = {nodes, request.gpus_per_node};
  std::set<std::pair<std::string, double>> seen;
  // A model-parallel group's placement and the fabric as it sees it are
  // the same for each of its collectives: found once per row.
  std::array<std::optional<std::pair<GroupPlacement, Fabric>>, 5> by_group;
  const auto placed = [&](const StepCollective& c) -> std::pair<GroupPlacement, Fabric> {
    const GroupPlacement at = place_group(c, request.workload.step, row.cluster);
    return {at, at.net_share < 1 ? sharing(f, at, row.cluster) : f};
  };
  row.timing = replay(request.workload.step, [&](const StepCollective& c) {
    Estimate e{"measured", c.measured_seconds, ""};
    if (c.modelled && c.group == Group::World) {
      // The job's own collectives, or a captured subgroup's of its size.
      const GroupPlacement at = place_group(c, request.workload.step, row.cluster);
      e = at.net_share < 1 ? estimate(sharing(f, at, row.cluster), at.cluster, c.op, c.bytes, request.library)
                           : estimate(f, at.cluster, c.op, c.bytes, request.library);
    } else if (c.modelled) {
      auto& group = by_group[static_cast<std::size_t>(c.group)];
      if (!group) group = placed(c);
      e = estimate(group->second, group->first.cluster, c.op, c.bytes, request.library);
    }
    if (seen.insert({c.name, c.bytes}).second)
      row.collectives.push_back({c.name, c.bytes, e.algo, e.protocol, e.seconds});
    return e.seconds;
  });
  if (row.timing.step_seconds > 0) {
    row.samples_per_s = row.cluster.ranks() * request.workload.samples_per_step / row.timing.step_seconds;
    row.network_efficiency = row.timing.compute_seconds / row.timing.step_seconds;
  }
  return row;
}

// NVIDIA's published one-node scaling of ResNet-50 v1.5 in PyTorch
// (DeepLearningExamples, pytorch-21.03): 8 GPUs against 8 x one, on DGX
// A100 (TF32 0.965, mixed precision 0.84), DGX-1 16 GB (0.97, 0.866) and
// DGX-1 32 GB (0.969, 0.87). Their median is the default.
constexpr double kDefaultOneNode = 0.92;
constexpr const char* kDefaultOneNodeSource =
    "a default, not a measurement of this job: 0.92, the median of NVIDIA's six published one-node scalings of "
    "ResNet-50 v1.5 in PyTorch (0.84-0.97 on DGX A100 and DGX-1, TF32/FP32 and mixed precision; "
    "NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5/README.md)";

NodeLoss node_loss(const PlanRequest& request, const Fabric& first) {
  NodeLoss loss;
  const Workload& w = request.workload;
  if (request.gpus_per_node == 1) {
    loss.source = "one GPU per node: no loss inside a node";
    return loss;
  }
  // With model parallelism wider than a node there is no one-node job to
  // compare: the in-node loss is taken whole, none of it charged to the
  // model's own communication inside the node.
  const bool one_node_job = parallel_misfit(w.step.parallel, {1, request.gpus_per_node}).empty();
  loss.modelled = one_node_job ? model_row(request, first, 1).network_efficiency : 1;
  if (w.one_node_efficiency > 0) {
    loss.measured = w.one_node_efficiency;
    loss.source = w.one_node_source;
  } else if (w.origin == "captured") {
    loss.measured = loss.modelled;
    loss.source = "a captured profile's step holds its own losses";
  } else {
    loss.measured = kDefaultOneNode;
    loss.source = kDefaultOneNodeSource;
    loss.is_default = true;
  }
  loss.factor = loss.modelled > 0 ? std::min(1.0, loss.measured / loss.modelled) : 1;
  return loss;
}

Plan plan_for(const PlanRequest& request, const std::vector<Fabric>& known) {
  Plan plan;
  plan.request = request;
  if (request.fabrics.empty() || request.nodes.empty()) {
    throw Error(ErrorCode::InvalidArgument, "rdmx plan needs at least one fabric and one node count",
                {.op = "rdmx plan", .hint = "--fabrics ib-ndr,tcp-100 --nodes 2,4"});
  }
  if (request.gpus_per_node < 1) {
    throw Error(ErrorCode::InvalidArgument,
                "--gpus-per-node must be at least 1, not " + std::to_string(request.gpus_per_node),
                {.op = "rdmx plan"});
  }
  for (const auto& name : request.fabrics) plan.fabrics.push_back(find_fabric(known, name));
  if (request.links.mode != Links::AsBuilt) {
    const Fabric& first = plan.fabrics.front();
    const int nics = request.links.mode == Links::Given ? request.links.nics : first.nics_per_node;
    const double gbit = request.links.mode == Links::Given ? request.links.nic_gbit : first.nic_gbit;
    const std::string why = request.links.mode == Links::Given
                                ? "--links " + to_string(request.links)
                                : "--links equal: those of " + first.name + ", the first asked";
    for (Fabric& f : plan.fabrics) f = on_links(f, nics, gbit, why);
  }
  for (const int nodes : request.nodes) {
    if (nodes < 1) {
      throw Error(ErrorCode::InvalidArgument, "--nodes: a node count must be at least 1, not " + std::to_string(nodes),
                  {.op = "rdmx plan"});
    }
  }
  plan.node_loss = node_loss(request, plan.fabrics.front());
  for (const Fabric& f : plan.fabrics) {
    if (request.prices && !request.prices->fabric_per_node_per_hour.count(f.name)) {
      throw Error(ErrorCode::InvalidArgument, "the price file has no price for fabric '" + f.name + "'",
                  {.op = "rdmx plan", .hint = "add it under fabric_per_node_per_hour"});
    }
    // The band's two fabrics: the whole path to the network, host staging
    // too where it binds, as much slower and faster as the published
    // clusters on this transport were against the model.
    const Band band = calibration_band(builtin_validation(), f.transport);
    Fabric slow = f, fast = f;
    slow.efficiency *= band.low;
    slow.staging_gb_s *= band.low;
    fast.efficiency *= band.high;
    fast.staging_gb_s *= band.high;
    for (const int nodes : request.nodes) {
      PlanRow row = model_row(request, f, nodes);
      row.samples_per_s *= plan.node_loss.factor;
      row.efficiency = row.network_efficiency * plan.node_loss.factor;
      row.efficiency_low = modelled_efficiency(request, slow, nodes, plan.node_loss.factor);
      row.efficiency_high = modelled_efficiency(request, fast, nodes, plan.node_loss.factor);
      if (request.prices) {
        const double hourly =
            nodes * (request.prices->node_per_hour + request.prices->fabric_per_node_per_hour.at(f.name));
        row.cost_per_hour = hourly;
        if (row.samples_per_s > 0) row.cost_per_million_samples = hourly / 3600 / row.samples_per_s * 1e6;
      }
      plan.rows.push_back(std::move(row));
    }
  }
  for (const int nodes : request.nodes) plan.per_node_count.push_back(recommend(plan, nodes));
  plan.overall = recommend(plan, 0);
  return plan;
}

std::string same_name(const std::string& s) {
  std::string out;
  for (char c : s) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Which library was modelled, and what the other one would recommend: the
// library alone can flip an answer, so the reader is told when it does.
std::string library_note(const Plan& plan, const std::vector<Fabric>& known) {
  const Library used = plan.request.library;
  const bool nccl = used != Library::Rdmx;
  std::string note = nccl ? "collectives modelled as NCCL runs them (" + std::string(to_string(used)) +
                                "), the library PyTorch uses on GPUs"
                          : "collectives modelled as rdmx runs them (--library rdmx); PyTorch on GPUs runs NCCL";
  PlanRequest other = plan.request;
  other.library = nccl ? Library::Rdmx : Library::Nccl;
  const Plan alt = plan_for(other, known);
  const std::string mine = plan.overall.fabric.empty() ? "none" : plan.overall.fabric;
  const std::string theirs = alt.overall.fabric.empty() ? "none" : alt.overall.fabric;
  note += "; with --library " + std::string(to_string(other.library)) + " the recommendation " +
          (mine == theirs ? "is the same (" + mine + ")" : "would be " + theirs + " instead of " + mine);
  return note;
}

}  // namespace

double modelled_efficiency(const PlanRequest& request, const Fabric& f, int nodes, double factor) {
  return model_row(request, f, nodes).network_efficiency * factor;
}

Plan make_plan(const PlanRequest& request, const std::vector<Fabric>& known) {
  Plan plan = plan_for(request, known);
  plan.hinges = find_hinges(plan);
  plan.notes.push_back(library_note(plan, known));
  const NodeLoss& loss = plan.node_loss;
  if (request.gpus_per_node > 1) {
    std::string note = "loss besides the network: one node keeps " + format_printf("%.1f%%", loss.measured * 100) +
                       " of its GPUs' one-GPU rate (" + loss.source + "); the model charges " +
                       format_printf("%.1f%%", (1 - loss.modelled) * 100) +
                       " of that to communication inside the node, so " + "every row's throughput is multiplied by " +
                       format_printf("%.3f", loss.factor);
    if (loss.measured > loss.modelled) note += " (the model's own loss is already larger: nothing more is applied)";
    if (loss.is_default) note += "; give --one-gpu-rate and --one-node-rate measured on your job instead";
    plan.notes.push_back(note);
  }
  // Operations of a captured step the model does not cost keep their
  // measured time on every fabric: the reader is told which.
  std::map<std::string, int> kept;
  for (const StepCollective& c : request.workload.step.collectives) {
    if (!c.modelled) ++kept[c.name];
  }
  if (!kept.empty()) {
    std::string list;
    for (const auto& [name, count] : kept)
      list += (list.empty() ? "" : ", ") + name + " (" + std::to_string(count) + ")";
    plan.notes.push_back("not re-costed for other fabrics, so their measured times stand on every one: " + list +
                         " per step; the model costs all_reduce, all_gather, reduce_scatter, broadcast and reduce");
  }
  // Fabrics whose nodes have other GPUs than the compute was measured on,
  // by their GPU.
  const std::string& gpu = request.workload.compute_gpu;
  std::map<std::string, std::string> others;
  for (const Fabric& f : plan.fabrics) {
    if (gpu.empty() || same_name(gpu) == same_name(f.gpu)) continue;
    std::string& names = others[f.gpu];
    names += (names.empty() ? "" : ", ") + f.name;
  }
  for (const auto& [their_gpu, names] : others) {
    plan.notes.push_back("the step's compute was measured on " + gpu + ", but " + names + " describe " + their_gpu +
                         " nodes: the compute is taken as given, so those rows hold for " + gpu +
                         " GPUs on that fabric (give --compute-ms measured on " + their_gpu + ")");
  }
  return plan;
}

nlohmann::json plan_to_json(const Plan& plan) {
  const auto& rq = plan.request;
  nlohmann::json j;
  j["rdmx_plan"] = 1;
  j["model"] = {{"name", rq.workload.name},
                {"origin", rq.workload.origin},
                {"source", rq.workload.source},
                {"parameters", rq.workload.parameters},
                {"samples_per_step_per_gpu", rq.workload.samples_per_step},
                {"collectives_per_step", rq.workload.step.collectives.size()}};
  j["library"] = to_string(rq.library);
  j["links"] = to_string(rq.links);
  j["gpus_per_node"] = rq.gpus_per_node;
  j["nodes"] = rq.nodes;
  j["target_efficiency"] = rq.target_efficiency;
  j["fabrics"] = nlohmann::json::object();
  for (const auto& f : plan.fabrics) j["fabrics"][f.name] = fabric_to_json(f);
  if (rq.prices) {
    j["prices"] = {{"currency", rq.prices->currency},
                   {"node_per_hour", rq.prices->node_per_hour},
                   {"fabric_per_node_per_hour", rq.prices->fabric_per_node_per_hour},
                   {"source", rq.prices->source}};
  }
  j["rows"] = nlohmann::json::array();
  for (const auto& r : plan.rows) {
    nlohmann::json row = {{"fabric", r.fabric},
                          {"nodes", r.cluster.nodes},
                          {"gpus_per_node", r.cluster.ranks_per_node},
                          {"step_ms", r.timing.step_seconds * 1e3},
                          {"compute_ms", r.timing.compute_seconds * 1e3},
                          {"comm_ms", r.timing.comm_seconds * 1e3},
                          {"exposed_comm_ms", r.timing.exposed_seconds * 1e3},
                          {"samples_per_s", r.samples_per_s},
                          {"efficiency", r.efficiency},
                          {"network_efficiency", r.network_efficiency},
                          {"efficiency_band", {r.efficiency_low, r.efficiency_high}}};
    if (r.cost_per_hour) row["cost_per_hour"] = *r.cost_per_hour;
    if (r.cost_per_million_samples) row["cost_per_million_samples"] = *r.cost_per_million_samples;
    row["collectives"] = nlohmann::json::array();
    for (const auto& c : r.collectives) {
      row["collectives"].push_back(
          {{"op", c.op}, {"bytes", c.bytes}, {"algo", c.algo}, {"protocol", c.protocol}, {"ms", c.seconds * 1e3}});
    }
    j["rows"].push_back(row);
  }
  const auto rec = [](const Recommendation& r) {
    return nlohmann::json{{"nodes", r.nodes},
                          {"fabric", r.fabric.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.fabric)},
                          {"why", r.why}};
  };
  j["notes"] = plan.notes;
  j["hinges"] = nlohmann::json::array();
  for (const Hinge& h : plan.hinges) {
    j["hinges"].push_back(
        {{"fabric", h.fabric},
         {"nodes", h.nodes},
         {"needed_net_gb_s", h.needed_gb_s < 0 ? nlohmann::json(nullptr) : nlohmann::json(h.needed_gb_s)},
         {"profiled_net_gb_s", h.profiled_gb_s},
         {"meets", h.meets},
         {"text", hinge_text(plan, h)}});
  }
  j["node_loss"] = {{"one_node_efficiency", plan.node_loss.measured},
                    {"modelled_one_node_efficiency", plan.node_loss.modelled},
                    {"factor", plan.node_loss.factor},
                    {"source", plan.node_loss.source},
                    {"default", plan.node_loss.is_default}};
  j["recommendation"] = rec(plan.overall);
  j["per_node_count"] = nlohmann::json::array();
  for (const auto& r : plan.per_node_count) j["per_node_count"].push_back(rec(r));
  j["validated_against"] = validation_to_json(builtin_validation());
  return j;
}

std::string plan_text(const Plan& plan) {
  const auto& rq = plan.request;
  std::string out;
  out += "# rdmx plan: " + rq.workload.name + " (" + rq.workload.origin + "; " + rq.workload.source + ")\n";
  out += "# " + std::to_string(rq.gpus_per_node) + " GPUs per node, collectives as " + to_string(rq.library) +
         " runs them, target efficiency " + format_printf("%.0f%%", rq.target_efficiency * 100) + "\n";
  out += "# links: " + links_text(plan) + "\n";
  for (const auto& f : plan.fabrics) {
    out += "\n" + fabric_label(f) + ": " + f.description + "\n";
    char head[256];
    std::snprintf(head, sizeof head, "%7s %11s %11s %11s %14s %10s %13s", "nodes", "step_ms", "compute_ms",
                  "exposed_ms", "samples/s", "efficiency", "band");
    out += head;
    if (rq.prices) out += "    " + rq.prices->currency + "/hour  " + rq.prices->currency + "/1M samples";
    out += "\n";
    for (const auto& r : plan.rows) {
      if (r.fabric != f.name) continue;
      char line[256];
      char band[64];
      std::snprintf(band, sizeof band, "%.1f-%.1f%%", r.efficiency_low * 100, r.efficiency_high * 100);
      std::snprintf(line, sizeof line, "%7d %11.2f %11.2f %11.2f %14.1f %9.1f%% %13s", r.cluster.nodes,
                    r.timing.step_seconds * 1e3, r.timing.compute_seconds * 1e3, r.timing.exposed_seconds * 1e3,
                    r.samples_per_s, r.efficiency * 100, band);
      out += line;
      if (r.cost_per_hour) {
        std::snprintf(line, sizeof line, " %14.2f %16.3f", *r.cost_per_hour, r.cost_per_million_samples.value_or(0));
        out += line;
      }
      out += "\n";
    }
  }
  out += "\n";
  for (const auto& r : plan.per_node_count) {
    out += format_printf("%3.0f nodes: ", r.nodes) + (r.fabric.empty() ? "none" : r.fabric) + " (" + r.why + ")\n";
  }
  out += "recommended: " + (plan.overall.fabric.empty() ? std::string("none") : plan.overall.fabric) + " (" +
         plan.overall.why + ")\n";
  for (const Hinge& h : plan.hinges) out += "hinges on: " + hinge_text(plan, h) + "\n";
  for (const auto& note : plan.notes) out += "note: " + note + "\n";
  out +=
      "band: the efficiency with the network as much slower and faster as published clusters on its transport "
      "were against the model (the collectives below that it meets)\n";
  const auto box = validation_box_lines(builtin_validation());
  out += "\n" + box.front() + "\n";
  for (std::size_t i = 1; i < box.size(); ++i) out += "  " + box[i] + "\n";
  return out;
}

}  // namespace rdmx::cli::plan
