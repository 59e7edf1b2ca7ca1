// SPDX-License-Identifier: MIT
// Writes a described job's step (workload.hpp's StepTrace) action by
// action: compute, a collective issued, a wait for it, idle time, or
// another step's actions appended. DDP's, the sharded steps' and the
// model-parallel step's descriptions are all written through it.
#pragma once

#include <algorithm>
#include <string>
#include <utility>

#include "plan/workload.hpp"

namespace rdmx::cli::plan {

class StepBuilder {
 public:
  // `type`: the collectives' element type, as a captured profile names it.
  explicit StepBuilder(std::string type) : type_(std::move(type)) {}
  // Gradients' element type: float16 for 2-byte gradients, else float32.
  static std::string gradient_type(const Description& d) { return d.gradient_bytes == 2 ? "float16" : "float32"; }

  void compute(double seconds) { s_.actions.push_back({StepAction::Compute, std::max(0.0, seconds), -1}); }
  void idle(double seconds) { s_.actions.push_back({StepAction::Idle, std::max(0.0, seconds), -1}); }
  // Issues `op` of `bytes` among `group`, standing for `repeat` calls
  // (named `name`, else the operation's own name); returns its index.
  int issue(Collective op, double bytes, Group group = Group::World, int repeat = 1, std::string name = "") {
    StepCollective c;
    c.op = op;
    c.bytes = bytes;
    c.type = type_;
    c.name = name.empty() ? to_string(op) : std::move(name);
    c.group = group;
    c.repeat = repeat;
    const int index = static_cast<int>(s_.collectives.size());
    s_.collectives.push_back(std::move(c));
    s_.actions.push_back({StepAction::Issue, 0, index});
    return index;
  }
  void wait(int index) { s_.actions.push_back({StepAction::Wait, 0, index}); }
  // `step`'s actions after these, its collectives run among `group`.
  void append(const StepTrace& step, Group group) {
    const int base = static_cast<int>(s_.collectives.size());
    for (StepCollective c : step.collectives) {
      c.group = group;
      s_.collectives.push_back(std::move(c));
    }
    for (StepAction a : step.actions) {
      if (a.collective >= 0) a.collective += base;
      s_.actions.push_back(a);
    }
  }
  StepTrace take() { return std::move(s_); }

 private:
  std::string type_;
  StepTrace s_;
};

}  // namespace rdmx::cli::plan
