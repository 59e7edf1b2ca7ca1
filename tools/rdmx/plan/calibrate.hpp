// SPDX-License-Identifier: MIT
// rdmx plan calibrate: measures the fabric this job runs on (latency of a
// collective step and bandwidth between nodes and inside one, reduction
// rate) and writes a fabric profile the model reads like the built-in ones.
#pragma once

#include <CLI/CLI.hpp>

namespace rdmx::cli {

void register_plan_calibrate(CLI::App& plan);

}  // namespace rdmx::cli
