// SPDX-License-Identifier: MIT
// The HTML report of `rdmx bench`: one self-contained page (inline CSS and
// SVG, no script, nothing fetched) rendered from the bench results document
// described by docs/schemas/bench.schema.json.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace rdmx::cli {

// The whole page. Missing or mistyped fields render as blanks or notes rather
// than throwing, so a partly failed bench still gets its report.
std::string render_html_report(const nlohmann::json& bench);

// What every number of a same-host bench needs said next to it: the terminal
// summary (perf/bench.cpp) and the page print this same text.
extern const char* const kSameHostCaveat;

// The pages' shared style sheet (this report and rdmx plan's).
const char* report_style();

}  // namespace rdmx::cli
