// SPDX-License-Identifier: MIT
// A validator for the subset of JSON Schema (draft 2020-12) that the schemas
// in docs/schemas use: type (one or a list), properties, required,
// additionalProperties (boolean), items, enum, const, minimum, maximum,
// minItems, pattern-free strings. Unknown keywords are an error, so a schema
// cannot silently ask for more than is checked.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace rdmx::test {

// Every violation, as "path: what is wrong"; empty when `doc` conforms.
std::vector<std::string> validate_json(const nlohmann::json& doc, const nlohmann::json& schema);

// Loads docs/schemas/<name> from the source tree.
nlohmann::json load_schema(const std::string& name);

// A test failure for each way `doc` breaks docs/schemas/<schema>.
void expect_valid(const nlohmann::json& doc, const std::string& schema);

}  // namespace rdmx::test
