// SPDX-License-Identifier: MIT
// Reading the fields of rdmx plan's documents (fabric profiles, model
// presets, captured profiles) with errors that name the file, the entry and
// the field, and say what was expected.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace rdmx::cli::plan {

struct DocPlace {
  std::string origin;  // the file, or "built-in fabrics"
  std::string entry;   // "fabric ib-ndr", "step 3"
};

[[noreturn]] void bad_field(const DocPlace& place, const std::string& field, const std::string& problem);

double number_field(const nlohmann::json& obj, const DocPlace& place, const std::string& field, double lo, double hi);
double number_field_or(const nlohmann::json& obj, const DocPlace& place, const std::string& field, double lo, double hi,
                       double fallback);
std::string text_field(const nlohmann::json& obj, const DocPlace& place, const std::string& field);
std::string text_field_or(const nlohmann::json& obj, const DocPlace& place, const std::string& field,
                          const std::string& fallback);
bool bool_field(const nlohmann::json& obj, const DocPlace& place, const std::string& field);

// The document in `path`, parsed; errors name the file and the byte.
nlohmann::json read_json_file(const std::string& path, const std::string& what);

}  // namespace rdmx::cli::plan
