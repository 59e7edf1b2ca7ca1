// SPDX-License-Identifier: MIT
// rdmx plan's validation on real clusters (docs/ADVISOR.md, "Validation on
// real clusters"): published measurements, none made by this project, each
// with the rdmx command that replays it, what was published and what the
// model gives (tools/rdmx/plan/data/validation.json, compiled in). Every
// plan shows them as its "validated against" box, and the spread of the
// model's error on them as each efficiency's band.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rdmx::cli::plan {

struct ValidationRow {
  std::string id;
  std::string kind;       // "collective": bus bandwidth, GB/s; "scaling": efficiency, 0-1
  std::string transport;  // "rdma" or "socket"
  std::string label;
  std::string source;
  std::string published_text;  // as published, in words
  std::string role;            // which model constant was fitted to it, or "checked: ..."
  double published = 0;
  double modelled = 0;            // as recorded; the replay in make test keeps it current
  std::vector<std::string> args;  // the rdmx command, "{data}" for tools/rdmx/plan/data
  int nodes = 0;
  int relative_to_nodes = 0;              // scaling against this node count rather than one GPU
  std::optional<double> explained_bound;  // its own bound, when it is outside the common one
  std::string explained_why;

  // Collectives: modelled / published - 1; scaling: modelled - published,
  // in points.
  double error() const;
};

struct Validation {
  double collective_relative = 0.2;
  double scaling_points = 5;
  std::vector<ValidationRow> rows;

  double common_bound(const ValidationRow& row) const {
    return row.kind == "collective" ? collective_relative : scaling_points;
  }
  bool within_common_bound(const ValidationRow& row) const;
};

// A validation document; throws rdmx::Error naming `origin`, the row and
// the field for anything missing or mistyped.
Validation parse_validation(const nlohmann::json& doc, const std::string& origin);
// The compiled-in table.
const Validation& builtin_validation();

// "+4%" for a collective, "-9.5 points" for scaling.
std::string error_text(const ValidationRow& row);

// The spread of published / modelled bus bandwidth over the collective rows
// on `transport` that the model meets within the common bound: the factor
// range a plan's efficiency band applies to the network's bandwidth.
struct Band {
  double low = 1;
  double high = 1;
  int rows = 0;
};
Band calibration_band(const Validation& v, const std::string& transport);

// The "validated against" box: a heading line and one line per row.
std::vector<std::string> validation_box_lines(const Validation& v);
nlohmann::json validation_to_json(const Validation& v);

}  // namespace rdmx::cli::plan
