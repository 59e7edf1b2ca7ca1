// SPDX-License-Identifier: MIT
// The step of a sharded data-parallel job (ZeRO-1, -2, -3 / FSDP), as the
// planner replays it: which collectives, of what size, issued and waited
// where in the forward, backward and optimizer (docs/ADVISOR.md, "Sharded
// data parallelism").
#include <algorithm>
#include <vector>

#include "plan/step_builder.hpp"
#include "plan/workload.hpp"
#include "rdmx/error.hpp"

namespace rdmx::cli::plan {
Sharding parse_sharding(const std::string& name) {
  if (name == "ddp") return Sharding::Ddp;
  if (name == "zero1") return Sharding::Zero1;
  if (name == "zero2") return Sharding::Zero2;
  if (name == "zero3" || name == "fsdp") return Sharding::Zero3;
  throw Error(ErrorCode::InvalidArgument, "unknown sharding '" + name + "'",
              {.op = "rdmx plan", .hint = "ddp, zero1, zero2, zero3 or fsdp (FSDP's full sharding is ZeRO-3)"});
}

const char* to_string(Sharding sharding) {
  switch (sharding) {
    case Sharding::Ddp: return "ddp";
    case Sharding::Zero1: return "zero1";
    case Sharding::Zero2: return "zero2";
    case Sharding::Zero3: return "zero3";
  }
  return "?";
}

StepTrace describe_sharded_step(const Description& d) {
  const std::vector<double> units = bucket_sizes(d);
  const double total = d.parameters * d.gradient_bytes;
  const double forward = d.compute_seconds * d.forward_share;
  const double backward = d.compute_seconds * (1 - d.forward_share) - d.optimizer_seconds;
  auto share = [&](double unit) { return total > 0 ? unit / total : 0; };
  StepBuilder b(StepBuilder::gradient_type(d));
  std::vector<int> pending;
  if (d.sharding == Sharding::Zero3) {
    // Each unit's parameters are gathered before its forward, the next
    // one's prefetched meanwhile (FSDP's forward prefetch).
    std::vector<int> gathered{b.issue(Collective::AllGather, units.front())};
    for (std::size_t u = 0; u < units.size(); ++u) {
      if (u + 1 < units.size()) gathered.push_back(b.issue(Collective::AllGather, units[u + 1]));
      b.wait(gathered[u]);
      b.compute(forward * share(units[u]));
    }
    // Backward in reverse: gathered again (resharded after the forward),
    // the one before prefetched, and each unit's gradients reduce_scattered
    // once computed.
    const std::size_t n = units.size();
    std::vector<int> again(n, -1);
    again[n - 1] = b.issue(Collective::AllGather, units[n - 1]);
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t u = n - 1 - k;
      if (u > 0) again[u - 1] = b.issue(Collective::AllGather, units[u - 1]);
      b.wait(again[u]);
      b.compute(backward * share(units[u]));
      pending.push_back(b.issue(Collective::ReduceScatter, units[u]));
    }
    for (int i : pending) b.wait(i);
    b.compute(d.optimizer_seconds);
    return b.take();
  }
  // ZeRO-1 and -2: DDP's buckets, all_reduced (ZeRO-1) or reduce_scattered
  // (ZeRO-2) as the backward produces them; the optimizer updates this
  // rank's shard; the updated parameters are all_gathered before the next
  // step can use them.
  b.compute(forward);
  const Collective reduce = d.sharding == Sharding::Zero1 ? Collective::AllReduce : Collective::ReduceScatter;
  for (double unit : units) {
    b.compute(backward * share(unit));
    pending.push_back(b.issue(reduce, unit));
  }
  for (int i : pending) b.wait(i);
  b.compute(d.optimizer_seconds);
  std::vector<int> gathered;
  for (double unit : units) gathered.push_back(b.issue(Collective::AllGather, unit));
  for (int i : gathered) b.wait(i);
  return b.take();
}

}  // namespace rdmx::cli::plan
