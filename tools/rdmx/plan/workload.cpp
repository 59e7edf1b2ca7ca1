// SPDX-License-Identifier: MIT
#include "plan/workload.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

#include "plan/doc_fields.hpp"
#include "plan/step_builder.hpp"
#include "rdmx/error.hpp"

// tools/rdmx/plan/data/models.json, compiled in by tools/CMakeLists.txt.
extern const char rdmx_plan_builtin_models[];

namespace rdmx::cli::plan {

StepTiming replay(const StepTrace& step, const std::function<double(const StepCollective&)>& collective_seconds) {
  StepTiming out;
  std::vector<double> done(step.collectives.size(), 0);
  double t = 0, queue_free = 0;
  for (const StepAction& a : step.actions) {
    switch (a.kind) {
      case StepAction::Compute:
        t += a.seconds;
        out.compute_seconds += a.seconds;
        break;
      case StepAction::Idle: t += a.seconds; break;
      case StepAction::Issue: {
        const auto i = static_cast<std::size_t>(a.collective);
        const double cost = collective_seconds(step.collectives[i]) * step.collectives[i].repeat;
        out.comm_seconds += cost;
        done[i] = std::max(t, queue_free) + cost;
        queue_free = done[i];
        break;
      }
      case StepAction::Wait: t = std::max(t, done[static_cast<std::size_t>(a.collective)]); break;
    }
  }
  out.step_seconds = t;
  out.exposed_seconds = std::max(0.0, t - out.compute_seconds);
  return out;
}

void scale_compute(StepTrace& step, double total_seconds) {
  double sum = 0;
  for (const StepAction& a : step.actions) {
    if (a.kind == StepAction::Compute) sum += a.seconds;
  }
  if (sum <= 0) return;
  for (StepAction& a : step.actions) {
    if (a.kind == StepAction::Compute) a.seconds *= total_seconds / sum;
  }
}

std::vector<double> bucket_sizes(const Description& d) {
  std::vector<double> out;
  double left = d.parameters * d.gradient_bytes;
  double bucket = d.first_bucket_bytes;
  while (left > 0.5) {
    bucket = std::min(bucket, left);
    out.push_back(bucket);
    left -= bucket;
    bucket = d.bucket_bytes;
  }
  return out;
}

StepTrace describe_step(const Description& d) {
  const Parallelism& p = d.parallel;
  if (p.tensor > 1 || p.pipeline > 1 || p.expert > 1) return describe_parallel_step(d);
  if (d.sharding != Sharding::Ddp) return describe_sharded_step(d);
  StepBuilder b(StepBuilder::gradient_type(d));
  const double total = d.parameters * d.gradient_bytes;
  const double backward = d.compute_seconds * (1 - d.forward_share) - d.optimizer_seconds;
  b.compute(d.compute_seconds * d.forward_share);
  std::vector<int> pending;
  for (const double bucket : bucket_sizes(d)) {
    b.compute(total > 0 ? std::max(0.0, backward) * bucket / total : 0);
    pending.push_back(b.issue(Collective::AllReduce, bucket));
  }
  for (const int i : pending) b.wait(i);
  b.compute(d.optimizer_seconds);
  return b.take();
}

const std::string& builtin_models_text() {
  static const std::string text(rdmx_plan_builtin_models);
  return text;
}

namespace {

// The built-in presets, or a file of the same form (--models-file).
nlohmann::json models_doc(const std::string& path) {
  static const nlohmann::json builtin = nlohmann::json::parse(builtin_models_text());
  nlohmann::json doc = path.empty() ? builtin : read_json_file(path, "model file");
  if (!doc.is_object() || !doc.contains("models") || !doc["models"].is_object()) {
    bad_field({path.empty() ? "built-in models" : path, "the file"}, "models",
              "must be an object of presets (as rdmx's tools/rdmx/plan/data/models.json)");
  }
  return doc;
}

}  // namespace

std::vector<std::string> preset_names(const std::string& models_file) {
  // The document outlives the loop: items() of a sub-object of a temporary
  // would iterate freed memory (the temporary dies before the loop body).
  const nlohmann::json doc = models_doc(models_file);
  std::vector<std::string> out;
  for (const auto& [name, m] : doc["models"].items()) out.push_back(name);
  return out;
}

Description preset_description(const std::string& name, std::string* source, const std::string& models_file) {
  const auto doc = models_doc(models_file);
  const auto& models = doc["models"];
  if (!models.contains(name)) {
    std::string known;
    for (const auto& [n, m] : models.items()) known += (known.empty() ? "" : ", ") + n;
    throw Error(ErrorCode::NotFound, "no model preset named '" + name + "'",
                {.op = "rdmx plan",
                 .hint = "presets" + (models_file.empty() ? std::string() : " in " + models_file) + ": " + known +
                         "; or a profile file captured with RDMX_PROFILE"});
  }
  const auto& m = models[name];
  const DocPlace place{models_file.empty() ? "built-in models" : models_file, "model " + name};
  Description d;
  d.parameters = number_field(m, place, "parameters", 1, 1e13);
  d.gradient_bytes = number_field_or(m, place, "gradient_bytes", 1, 8, 4);
  d.compute_seconds = number_field(m, place, "compute_ms", 0, 1e7) / 1e3;
  d.compute_gpu = text_field_or(m, place, "compute_gpu", "");
  d.one_node_efficiency = number_field_or(m, place, "one_node_efficiency", 0.01, 1, 0);
  if (d.one_node_efficiency > 0) d.one_node_source = text_field(m, place, "one_node_source");
  d.samples_per_step = number_field(m, place, "batch_per_gpu", 1, 1e7);
  d.bucket_bytes = number_field_or(m, place, "bucket_mib", 1.0 / 1024, 1 << 20, 25) * (1 << 20);
  d.first_bucket_bytes = number_field_or(m, place, "first_bucket_mib", 1.0 / 1024, 1 << 20, 1) * (1 << 20);
  d.layers = static_cast<int>(number_field_or(m, place, "layers", 1, 1e5, 0));
  d.hidden = number_field_or(m, place, "hidden", 1, 1e7, 0);
  d.seq_len = number_field_or(m, place, "seq_len", 1, 1e8, 0);
  if (source) {
    *source = text_field(m, place, "parameters_source") + "; compute: " + text_field(m, place, "compute_source");
    if (m.contains("bucket_source")) *source += "; buckets: " + text_field(m, place, "bucket_source");
    if (m.contains("shape_source")) *source += "; shape: " + text_field(m, place, "shape_source");
  }
  return d;
}

namespace {

struct CapturedCollective {
  StepCollective c;
  double issue = 0, wait = -1, done = 0;  // seconds from the step's start
};

struct CapturedStep {
  double duration = 0;
  bool marked = false;  // ended by profile_step(), not found by repetition
  std::vector<CapturedCollective> collectives;
};

CapturedStep parse_step(const nlohmann::json& j, const DocPlace& place) {
  CapturedStep s;
  s.duration = number_field(j, place, "duration_us", 0, 1e12) / 1e6;
  s.marked = j.contains("marked") && j["marked"].is_boolean() && j["marked"].get<bool>();
  if (!j.contains("collectives") || !j["collectives"].is_array()) bad_field(place, "collectives", "must be a list");
  int i = 0;
  for (const auto& cj : j["collectives"]) {
    const DocPlace at{place.origin, place.entry + ", collective " + std::to_string(i++)};
    CapturedCollective cc;
    cc.c.name = text_field(cj, at, "op");
    cc.c.modelled = parse_collective(cc.c.name, &cc.c.op);
    cc.c.bytes = number_field(cj, at, "bytes", 0, 1e15);
    // A subgroup's operation keeps its group's size at every layout.
    if (cj.contains("ranks") && cj["ranks"].is_number()) cc.c.group_ranks = cj["ranks"].get<int>();
    cc.c.type = text_field_or(cj, at, "type", "");
    cc.issue = number_field(cj, at, "issue_us", -1e12, 1e12) / 1e6;
    cc.done = number_field(cj, at, "done_us", -1e12, 1e12) / 1e6;
    if (cj.contains("wait_us") && !cj["wait_us"].is_null())
      cc.wait = number_field(cj, at, "wait_us", -1e12, 1e12) / 1e6;
    if (cc.done < cc.issue) bad_field(at, "done_us", "is before issue_us");
    cc.c.measured_seconds = cc.done - cc.issue;
    s.collectives.push_back(std::move(cc));
  }
  return s;
}

// The caller's timeline of a captured step. Collectives whose wait the
// recorder did not see (DDP waits on futures) count as waited when the
// step's last collective is issued: where DDP's backward ends.
StepTrace trace_of(const CapturedStep& s, int ranks) {
  StepTrace t;
  t.measured_seconds = s.duration;
  t.captured_ranks = ranks;
  double last_issue = 0;
  for (const auto& cc : s.collectives) last_issue = std::max(last_issue, cc.issue);
  struct Event {
    double at;
    int order;  // issues before waits at the same instant
    int index;
  };
  std::vector<Event> events;
  for (std::size_t i = 0; i < s.collectives.size(); ++i) {
    const auto& cc = s.collectives[i];
    t.collectives.push_back(cc.c);
    events.push_back({cc.issue, 0, static_cast<int>(i)});
    events.push_back({cc.wait >= 0 ? std::max(cc.wait, cc.issue) : last_issue, 1, static_cast<int>(i)});
  }
  std::stable_sort(events.begin(), events.end(),
                   [](const Event& a, const Event& b) { return a.at != b.at ? a.at < b.at : a.order < b.order; });
  double cursor = 0;
  for (const Event& e : events) {
    t.actions.push_back({StepAction::Compute, std::max(0.0, e.at - cursor), -1});
    if (e.order == 0) {
      t.actions.push_back({StepAction::Issue, 0, e.index});
      cursor = std::max(cursor, e.at);
    } else {
      t.actions.push_back({StepAction::Wait, 0, e.index});
      cursor = std::max({cursor, e.at, s.collectives[static_cast<std::size_t>(e.index)].done});
    }
  }
  t.actions.push_back({StepAction::Compute, std::max(0.0, s.duration - cursor), -1});
  return t;
}

}  // namespace

Workload load_captured_profile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw Error(ErrorCode::NotFound, "cannot open profile '" + path + "'",
                {.op = "rdmx plan", .hint = "write one with RDMX_PROFILE=path (docs/ADVISOR.md), or name a preset"});
  }
  Workload w;
  w.name = path;
  w.origin = "captured";
  int ranks = 0;
  double samples = 1, parameters = 0;
  std::vector<CapturedStep> steps, partial;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    const DocPlace place{path, "line " + std::to_string(line_no)};
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      bad_field(place, "(the line)", std::string("is not JSON: ") + e.what());
    }
    if (j.contains("rdmx_profile")) {
      ranks = static_cast<int>(number_field(j, place, "ranks", 1, 1e7));
      samples = number_field_or(j, place, "samples_per_step", 0, 1e9, 1);
      parameters = number_field_or(j, place, "parameters", 0, 1e15, 0);
      continue;
    }
    if (j.value("partial", false)) {
      partial.push_back(parse_step(j, place));
    } else {
      steps.push_back(parse_step(j, place));
    }
  }
  // The step the job ended in is cut short: used only when it is all there is.
  if (steps.empty()) steps = partial;
  // Once a program marks steps, what the recorder found before the first
  // mark is set-up and timing scaffolding (barriers, unsynchronised
  // steps), and the first marked step holds what ran before the mark.
  if (std::any_of(steps.begin(), steps.end(), [](const CapturedStep& s) { return s.marked; })) {
    std::erase_if(steps, [](const CapturedStep& s) { return !s.marked; });
  }
  if (ranks == 0) {
    throw Error(ErrorCode::InvalidArgument, path + ": no header line (\"rdmx_profile\"): not an rdmx profile",
                {.op = "rdmx plan", .hint = "profiles come from RDMX_PROFILE=path (docs/ADVISOR.md)"});
  }
  if (steps.empty()) {
    throw Error(ErrorCode::InvalidArgument, path + ": the profile holds no step",
                {.op = "rdmx plan",
                 .hint = "run at least one step, and mark steps (rdmx.torch.profile_step() or "
                         "rdmx::profile_step()) or let the recorder find them by repetition"});
  }
  // The first step warms up (DDP rebuilds its buckets after it): the median
  // of the others stands for the job.
  std::vector<CapturedStep> rest(steps.size() > 1 ? steps.begin() + 1 : steps.begin(), steps.end());
  std::sort(rest.begin(), rest.end(),
            [](const CapturedStep& a, const CapturedStep& b) { return a.duration < b.duration; });
  w.step = trace_of(rest[rest.size() / 2], ranks);
  w.samples_per_step = samples;
  w.parameters = parameters;
  w.source = "median of " + std::to_string(rest.size()) + " step(s) of " + std::to_string(steps.size()) +
             " captured on " + std::to_string(ranks) + " rank(s)";
  return w;
}

}  // namespace rdmx::cli::plan
