// SPDX-License-Identifier: MIT
// Workload profiles for rdmx plan. With RDMX_PROFILE=path set, every
// communicator records its collectives (operation, bytes, type, ranks) with
// the times they were issued, waited for and completed, relative to the
// training step, and writes one JSON line per step (docs/ADVISOR.md,
// "Profiles"). Nothing is recorded, and every call here returns at once,
// when RDMX_PROFILE is unset.
#pragma once

#include <cstddef>
#include <cstdint>

#include "rdmx/comm.hpp"

#include "rdmx/export.hpp"

RDMX_API_BEGIN

namespace rdmx::profile {

// Whether RDMX_PROFILE is set in this process.
bool enabled() noexcept;

// Ends the current training step: call it once per step, after the
// optimizer, on every rank. Without any call, a step ends where its anchor
// comes round again (same operation, size and group, everything before it
// completed): a collective nobody waited for at once that started on a quiet
// link, such as DDP's first gradient bucket, else the step's first
// collective (docs/ADVISOR.md, "Profiles").
void step();

// What the job is, for the planner's throughput: samples each rank
// processes per step, and the model's parameter count (0: unknown).
void describe(double samples_per_step, double parameters);

// The bytes a profile records for a call of `count` elements, as
// nccl-tests counts them: all_gather's and gather's output, reduce_scatter's,
// scatter's and all_to_all's input, the buffer of the others.
std::size_t counted_bytes(CollOp op, std::size_t count, DataType type, int ranks) noexcept;

// For code that queues collectives itself (the torch backend): a collective
// issued now, then waited for, then completed. Ids are never 0; 0 means
// "not recorded" and the other calls ignore it.
std::uint64_t issued(int rank, int ranks, CollOp op, std::size_t bytes, DataType type);
void waited(std::uint64_t id);
void completed(std::uint64_t id);

}  // namespace rdmx::profile
RDMX_API_END
