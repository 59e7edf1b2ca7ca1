// SPDX-License-Identifier: MIT
#include "plan/doc_fields.hpp"

#include <cmath>
#include <fstream>
#include <sstream>

#include "rdmx/error.hpp"

namespace rdmx::cli::plan {

void bad_field(const DocPlace& place, const std::string& field, const std::string& problem) {
  throw Error(ErrorCode::InvalidArgument, place.origin + ": " + place.entry + ": field '" + field + "' " + problem,
              {.op = "rdmx plan", .hint = "fix the file (docs/ADVISOR.md describes every field)"});
}

double number_field(const nlohmann::json& obj, const DocPlace& place, const std::string& field, double lo, double hi) {
  const auto it = obj.find(field);
  if (it == obj.end()) bad_field(place, field, "is missing");
  if (!it->is_number()) bad_field(place, field, "must be a number, not " + it->dump());
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    std::ostringstream range;
    range << "is " << v << ", outside [" << lo << ", " << hi << "]";
    bad_field(place, field, range.str());
  }
  return v;
}

double number_field_or(const nlohmann::json& obj, const DocPlace& place, const std::string& field, double lo, double hi,
                       double fallback) {
  if (!obj.contains(field)) return fallback;
  return number_field(obj, place, field, lo, hi);
}

std::string text_field(const nlohmann::json& obj, const DocPlace& place, const std::string& field) {
  const auto it = obj.find(field);
  if (it == obj.end()) bad_field(place, field, "is missing");
  if (!it->is_string()) bad_field(place, field, "must be a string, not " + it->dump());
  return it->get<std::string>();
}

std::string text_field_or(const nlohmann::json& obj, const DocPlace& place, const std::string& field,
                          const std::string& fallback) {
  if (!obj.contains(field)) return fallback;
  return text_field(obj, place, field);
}

bool bool_field(const nlohmann::json& obj, const DocPlace& place, const std::string& field) {
  const auto it = obj.find(field);
  if (it == obj.end()) bad_field(place, field, "is missing");
  if (!it->is_boolean()) bad_field(place, field, "must be true or false, not " + it->dump());
  return it->get<bool>();
}

nlohmann::json read_json_file(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) {
    throw Error(ErrorCode::NotFound, "cannot open " + what + " '" + path + "'",
                {.op = "rdmx plan", .hint = "check the path"});
  }
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(ErrorCode::InvalidArgument, what + " '" + path + "' is not JSON: " + e.what(),
                {.op = "rdmx plan", .hint = "fix the file, or write it again"});
  }
}

}  // namespace rdmx::cli::plan
