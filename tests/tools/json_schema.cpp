// SPDX-License-Identifier: MIT
#include "json_schema.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <stdexcept>

#include "run_cli.hpp"

namespace rdmx::test {
namespace {

using nlohmann::json;

// The keywords json_schema.hpp promises; anything else in a schema is an error.
const std::set<std::string> kKeywords = {
    "$schema", "$id",  "title", "description", "type",    "properties", "required",
    "items",   "enum", "const", "minimum",     "maximum", "minItems",   "additionalProperties",
};
const std::set<std::string> kTypes = {"object", "array", "string", "integer", "number", "boolean", "null"};

// The schema itself, walked whole before any document is checked: a
// misspelt keyword in a branch the document never reaches still fails.
void check_schema(const json& schema, const std::string& where, std::vector<std::string>& errors) {
  if (!schema.is_object()) {
    errors.push_back("schema " + where + ": a schema must be an object");
    return;
  }
  for (const auto& [key, value] : schema.items()) {
    const std::string at = where + "/" + key;
    if (!kKeywords.contains(key)) {
      errors.push_back("schema " + at + ": unknown keyword \"" + key + "\" (the validator would not check it)");
      continue;
    }
    if (key == "type") {
      const json types = value.is_array() ? value : json::array({value});
      if (types.empty()) errors.push_back("schema " + at + ": an empty list of types");
      for (const auto& t : types) {
        if (!t.is_string() || !kTypes.contains(t.get<std::string>())) {
          errors.push_back("schema " + at + ": unknown type " + t.dump());
        }
      }
    } else if (key == "properties") {
      if (!value.is_object()) {
        errors.push_back("schema " + at + ": must be an object");
        continue;
      }
      for (const auto& [name, sub] : value.items()) check_schema(sub, at + "/" + name, errors);
    } else if (key == "items") {
      check_schema(value, at, errors);
    } else if (key == "required") {
      bool ok = value.is_array();
      if (ok) {
        for (const auto& name : value) ok = ok && name.is_string();
      }
      if (!ok) errors.push_back("schema " + at + ": must be a list of property names");
    } else if (key == "additionalProperties") {
      if (!value.is_boolean()) errors.push_back("schema " + at + ": only true or false is supported");
    } else if (key == "enum") {
      if (!value.is_array() || value.empty()) errors.push_back("schema " + at + ": must be a non-empty list");
    } else if (key == "minimum" || key == "maximum") {
      if (!value.is_number()) errors.push_back("schema " + at + ": must be a number");
    } else if (key == "minItems") {
      if (!value.is_number_unsigned() && !(value.is_number_integer() && value.get<long long>() >= 0)) {
        errors.push_back("schema " + at + ": must be a non-negative integer");
      }
    } else if (key == "title" || key == "description" || key == "$schema" || key == "$id") {
      if (!value.is_string()) errors.push_back("schema " + at + ": must be a string");
    }
  }
}

bool has_type(const json& value, const std::string& type) {
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  if (type == "string") return value.is_string();
  if (type == "boolean") return value.is_boolean();
  if (type == "null") return value.is_null();
  if (type == "number") return value.is_number();
  if (type == "integer") {
    if (value.is_number_integer()) return true;  // signed and unsigned
    // JSON Schema counts 3.0 as an integer: the type is the value's, not its spelling.
    return value.is_number_float() && std::isfinite(value.get<double>()) &&
           value.get<double>() == std::floor(value.get<double>());
  }
  return false;
}

std::string type_name(const json& value) {
  if (value.is_number_integer()) return "integer";
  if (value.is_number_float()) return "number";
  return value.type_name();  // object, array, string, boolean, null
}

void validate(const json& doc, const json& schema, const std::string& path, std::vector<std::string>& errors) {
  if (auto it = schema.find("type"); it != schema.end()) {
    const json types = it->is_array() ? *it : json::array({*it});
    bool matched = false;
    for (const auto& t : types) matched = matched || (t.is_string() && has_type(doc, t.get<std::string>()));
    if (!matched) {
      errors.push_back(path + ": expected " + (types.size() == 1 ? types[0].get<std::string>() : types.dump()) +
                       ", found " + type_name(doc));
      return;  // the other keywords would only repeat the mismatch
    }
  }
  if (auto it = schema.find("const"); it != schema.end() && doc != *it) {
    errors.push_back(path + ": must be " + it->dump() + ", found " + doc.dump());
  }
  if (auto it = schema.find("enum"); it != schema.end() && it->is_array()) {
    if (std::find(it->begin(), it->end(), doc) == it->end()) {
      errors.push_back(path + ": " + doc.dump() + " is not one of " + it->dump());
    }
  }
  if (doc.is_number()) {
    const double number = doc.get<double>();
    if (auto it = schema.find("minimum"); it != schema.end() && it->is_number() && number < it->get<double>()) {
      errors.push_back(path + ": " + doc.dump() + " is below the minimum " + it->dump());
    }
    if (auto it = schema.find("maximum"); it != schema.end() && it->is_number() && number > it->get<double>()) {
      errors.push_back(path + ": " + doc.dump() + " is above the maximum " + it->dump());
    }
  }
  if (doc.is_array()) {
    if (auto it = schema.find("minItems");
        it != schema.end() && it->is_number() && doc.size() < it->get<std::size_t>()) {
      errors.push_back(path + ": " + std::to_string(doc.size()) + " items, fewer than minItems " + it->dump());
    }
    if (auto it = schema.find("items"); it != schema.end() && it->is_object()) {
      for (std::size_t i = 0; i < doc.size(); ++i) validate(doc[i], *it, path + "[" + std::to_string(i) + "]", errors);
    }
  }
  if (doc.is_object()) {
    const json empty = json::object();
    const auto props_it = schema.find("properties");
    const json& properties = props_it != schema.end() && props_it->is_object() ? *props_it : empty;
    if (auto it = schema.find("required"); it != schema.end() && it->is_array()) {
      for (const auto& name : *it) {
        if (name.is_string() && !doc.contains(name.get<std::string>())) {
          errors.push_back(path + ": missing required property \"" + name.get<std::string>() + "\"");
        }
      }
    }
    const auto extra_it = schema.find("additionalProperties");
    const bool extras_allowed = extra_it == schema.end() || !extra_it->is_boolean() || extra_it->get<bool>();
    for (const auto& [key, value] : doc.items()) {
      if (auto sub = properties.find(key); sub != properties.end()) {
        validate(value, *sub, path + "." + key, errors);
      } else if (!extras_allowed) {
        errors.push_back(path + ": property \"" + key + "\" is not in the schema (additionalProperties is false)");
      }
    }
  }
}

}  // namespace

std::vector<std::string> validate_json(const json& doc, const json& schema) {
  std::vector<std::string> errors;
  check_schema(schema, "#", errors);
  if (!errors.empty()) return errors;  // a broken schema would make any verdict on the document meaningless
  validate(doc, schema, "$", errors);
  return errors;
}

json load_schema(const std::string& name) {
  const std::string path = source_path("docs/schemas/" + name);
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open the schema " + path);
  try {
    return json::parse(in);
  } catch (const json::parse_error& e) {
    throw std::runtime_error("the schema " + path + " is not valid JSON: " + e.what());
  }
}

void expect_valid(const json& doc, const std::string& schema) {
  for (const auto& p : validate_json(doc, load_schema(schema))) ADD_FAILURE() << schema << ": " << p;
}

}  // namespace rdmx::test
