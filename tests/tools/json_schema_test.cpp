// SPDX-License-Identifier: MIT
// The validator behind every --json test: each kind of violation it claims to
// catch is shown caught, so a schema test cannot pass because nothing is checked.
#include <gtest/gtest.h>

#include "json_schema.hpp"

namespace rdmx::test {
namespace {

using nlohmann::json;

const json kSchema = json::parse(R"({
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "$id": "test",
  "title": "a provider list",
  "type": "object",
  "additionalProperties": false,
  "required": ["schema", "providers"],
  "properties": {
    "schema": {"const": "test/1"},
    "providers": {
      "type": "array",
      "minItems": 1,
      "items": {
        "type": "object",
        "additionalProperties": false,
        "required": ["name", "usable", "count"],
        "properties": {
          "name": {"type": "string", "enum": ["shm", "tcp"]},
          "usable": {"type": "boolean"},
          "count": {"type": "integer", "minimum": 0, "maximum": 10},
          "device": {"type": ["string", "null"]}
        }
      }
    }
  }
})");

json valid_doc() {
  return json::parse(R"({"schema": "test/1",
                         "providers": [{"name": "shm", "usable": true, "count": 3, "device": null},
                                       {"name": "tcp", "usable": false, "count": 0, "device": "tcp:lo"}]})");
}

// Exactly one violation, and it mentions `needle`.
void expect_one_violation(const json& doc, const std::string& needle) {
  const auto errors = validate_json(doc, kSchema);
  ASSERT_EQ(errors.size(), 1u) << ::testing::PrintToString(errors);
  EXPECT_NE(errors[0].find(needle), std::string::npos) << errors[0];
}

TEST(JsonSchema, AcceptsAConformingDocument) {
  const auto errors = validate_json(valid_doc(), kSchema);
  EXPECT_TRUE(errors.empty()) << ::testing::PrintToString(errors);
}

TEST(JsonSchema, CatchesAMissingRequiredField) {
  json doc = valid_doc();
  doc["providers"][1].erase("usable");
  expect_one_violation(doc, "missing required property \"usable\"");
}

TEST(JsonSchema, CatchesAWrongType) {
  json doc = valid_doc();
  doc["providers"][0]["usable"] = "yes";
  expect_one_violation(doc, "$.providers[0].usable: expected boolean, found string");
  doc = valid_doc();
  doc["providers"][0]["count"] = 2.5;  // a number, but not an integer
  expect_one_violation(doc, "expected integer");
  doc = valid_doc();
  doc["providers"][0]["device"] = 7;  // neither of a type list
  expect_one_violation(doc, "device");
}

TEST(JsonSchema, CatchesAnExtraProperty) {
  json doc = valid_doc();
  doc["providers"][0]["colour"] = "blue";
  expect_one_violation(doc, "\"colour\" is not in the schema");
  doc = valid_doc();
  doc["extra"] = 1;
  expect_one_violation(doc, "\"extra\"");
}

TEST(JsonSchema, CatchesEnumConstAndRangeViolations) {
  json doc = valid_doc();
  doc["providers"][0]["name"] = "verbs";
  expect_one_violation(doc, "is not one of");
  doc = valid_doc();
  doc["schema"] = "test/2";
  expect_one_violation(doc, "must be \"test/1\"");
  doc = valid_doc();
  doc["providers"][0]["count"] = 11;
  expect_one_violation(doc, "above the maximum");
  doc = valid_doc();
  doc["providers"][0]["count"] = -1;
  expect_one_violation(doc, "below the minimum");
  doc = valid_doc();
  doc["providers"] = json::array();
  expect_one_violation(doc, "minItems");
}

TEST(JsonSchema, RejectsUnknownKeywordsAnywhereInTheSchema) {
  json schema = kSchema;
  // In a branch the document never reaches: still an error.
  schema["properties"]["providers"]["items"]["properties"]["device"]["pattern"] = "^tcp";
  const auto errors = validate_json(valid_doc(), schema);
  ASSERT_EQ(errors.size(), 1u) << ::testing::PrintToString(errors);
  EXPECT_NE(errors[0].find("unknown keyword \"pattern\""), std::string::npos) << errors[0];
  schema = kSchema;
  schema["properties"]["providers"]["type"] = "list";
  EXPECT_FALSE(validate_json(valid_doc(), schema).empty());
}

TEST(JsonSchema, TheInfoSchemaIsWellFormed) {
  const json schema = load_schema("info.schema.json");
  // Any document exposes schema problems first; a bare null shows them and then only a type mismatch.
  const auto errors = validate_json(json(), schema);
  ASSERT_EQ(errors.size(), 1u) << ::testing::PrintToString(errors);
  EXPECT_NE(errors[0].find("expected object"), std::string::npos) << errors[0];
}

}  // namespace
}  // namespace rdmx::test
