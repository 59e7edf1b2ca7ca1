// SPDX-License-Identifier: MIT
// rdmx plan's HTML report: one self-contained page (inline CSS and SVG, no
// script) rendered from the plan's JSON document (plan_to_json).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace rdmx::cli::plan {

std::string render_plan_html(const nlohmann::json& plan);

}  // namespace rdmx::cli::plan
