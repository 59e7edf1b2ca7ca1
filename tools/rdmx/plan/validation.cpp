// SPDX-License-Identifier: MIT
#include "plan/validation.hpp"

#include <algorithm>
#include <cmath>

#include "plan/planner.hpp"
#include "rdmx/error.hpp"

// tools/rdmx/plan/data/validation.json, compiled in by tools/CMakeLists.txt.
extern const char rdmx_plan_validation[];

namespace rdmx::cli::plan {

double ValidationRow::error() const {
  if (kind == "collective") return published > 0 ? modelled / published - 1 : 0;
  return (modelled - published) * 100;
}

bool Validation::within_common_bound(const ValidationRow& row) const {
  return std::abs(row.error()) <= common_bound(row) + 1e-9;
}

Validation parse_validation(const nlohmann::json& doc, const std::string& origin) {
  const auto bad = [&origin](const std::string& where, const std::string& what) {
    throw Error(ErrorCode::InvalidArgument, origin + ": " + where + ": " + what,
                {.op = "rdmx plan", .hint = "docs/ADVISOR.md, \"Validation on real clusters\", describes the file"});
  };
  if (!doc.is_object() || !doc.contains("rows") || !doc["rows"].is_array()) bad("the document", "expected \"rows\"");
  Validation v;
  if (doc.contains("bounds")) {
    v.collective_relative = doc["bounds"].value("collective_relative", v.collective_relative);
    v.scaling_points = doc["bounds"].value("scaling_points", v.scaling_points);
  }
  for (const auto& r : doc["rows"]) {
    ValidationRow row;
    const std::string where =
        "row " + (r.contains("id") && r["id"].is_string() ? r["id"].get<std::string>() : std::to_string(v.rows.size()));
    try {
      row.id = r.at("id").get<std::string>();
      row.kind = r.at("kind").get<std::string>();
      row.transport = r.at("transport").get<std::string>();
      row.label = r.at("label").get<std::string>();
      row.source = r.at("source").get<std::string>();
      row.published_text = r.at("published_text").get<std::string>();
      row.role = r.at("role").get<std::string>();
      row.published = r.at("published").get<double>();
      row.modelled = r.at("modelled").get<double>();
      row.args = r.at("args").get<std::vector<std::string>>();
      row.nodes = r.value("nodes", 0);
      row.relative_to_nodes = r.value("relative_to_nodes", 0);
      if (r.contains("explained")) {
        row.explained_bound = r["explained"].at("bound").get<double>();
        row.explained_why = r["explained"].at("why").get<std::string>();
      }
    } catch (const nlohmann::json::exception& e) {
      bad(where, std::string("a field is missing or mistyped (") + e.what() + ")");
    }
    if (row.kind != "collective" && row.kind != "scaling") bad(where, "kind must be collective or scaling");
    if (row.published <= 0) bad(where, "published must be positive");
    v.rows.push_back(std::move(row));
  }
  return v;
}

const Validation& builtin_validation() {
  static const Validation v =
      parse_validation(nlohmann::json::parse(rdmx_plan_validation), "tools/rdmx/plan/data/validation.json");
  return v;
}

std::string error_text(const ValidationRow& row) {
  if (row.kind == "collective") return format_printf("%+.0f%%", row.error() * 100);
  return format_printf("%+.1f points", row.error());
}

Band calibration_band(const Validation& v, const std::string& transport) {
  Band b;
  for (const auto& row : v.rows) {
    if (row.kind != "collective" || row.transport != transport || !v.within_common_bound(row)) continue;
    const double ratio = row.published / row.modelled;
    b.low = b.rows == 0 ? ratio : std::min(b.low, ratio);
    b.high = b.rows == 0 ? ratio : std::max(b.high, ratio);
    ++b.rows;
  }
  return b;
}

namespace {

std::string value_text(const ValidationRow& row, double value) {
  return row.kind == "collective" ? format_printf("%.3g GB/s", value) : format_printf("%.1f%%", value * 100);
}

}  // namespace

std::vector<std::string> validation_box_lines(const Validation& v) {
  int collectives = 0, scaling = 0, collectives_within = 0, scaling_within = 0;
  for (const auto& row : v.rows) {
    const bool within = v.within_common_bound(row);
    (row.kind == "collective" ? collectives : scaling) += 1;
    (row.kind == "collective" ? collectives_within : scaling_within) += within ? 1 : 0;
  }
  std::vector<std::string> out;
  out.push_back("validated against " + std::to_string(v.rows.size()) +
                " published measurements of real clusters (docs/ADVISOR.md, \"Validation on real clusters\"): " +
                std::to_string(collectives_within) + " of " + std::to_string(collectives) + " bus bandwidths within " +
                format_printf("%.0f%%", v.collective_relative * 100) + ", " + std::to_string(scaling_within) + " of " +
                std::to_string(scaling) + " scaling efficiencies within " + format_printf("%.0f", v.scaling_points) +
                " points; the others explained");
  for (const auto& row : v.rows) {
    std::string line = row.transport + ": " + row.label + ": " + value_text(row, row.published) + " published, " +
                       value_text(row, row.modelled) + " modelled (" + error_text(row) + ")";
    if (!v.within_common_bound(row)) line += "; outside, explained: " + row.explained_why;
    out.push_back(line);
  }
  return out;
}

nlohmann::json validation_to_json(const Validation& v) {
  nlohmann::json j;
  j["collective_relative_bound"] = v.collective_relative;
  j["scaling_points_bound"] = v.scaling_points;
  j["rows"] = nlohmann::json::array();
  for (const auto& row : v.rows) {
    nlohmann::json r = {{"id", row.id},
                        {"kind", row.kind},
                        {"transport", row.transport},
                        {"label", row.label},
                        {"source", row.source},
                        {"published", row.published},
                        {"modelled", row.modelled},
                        {"error", row.error()},
                        {"error_text", error_text(row)},
                        {"within_bound", v.within_common_bound(row)},
                        {"role", row.role}};
    if (row.explained_bound) r["explained"] = row.explained_why;
    j["rows"].push_back(r);
  }
  for (const char* transport : {"rdma", "socket"}) {
    const Band b = calibration_band(v, transport);
    j["bands"][transport] = {{"low", b.low}, {"high", b.high}, {"rows", b.rows}};
  }
  return j;
}

}  // namespace rdmx::cli::plan
