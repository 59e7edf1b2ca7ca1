// SPDX-License-Identifier: MIT
// The simulated driver's streams and events, asynchronous as a GPU's: work
// queued on a stream runs later, in order, on a thread of the stream's own,
// so code that forgets to wait for a stream, or orders work wrongly across
// streams, reads stale data here as it would on a GPU.
//
// The legacy default stream (a null CUstream) is such a stream too, with
// its implicit ordering: its work waits for the earlier work of every
// blocking stream (created with flags 0), and a blocking stream's work waits
// for its earlier work; non-blocking streams are ordered with nothing.
//
// RDMX_SIM_CUDA_DELAY_US=N (stress mode) delays every piece of stream work
// by a random 0..N microseconds, so that work which a real GPU may finish
// late finishes late here too.
//
// A host call that waits for a stream (a synchronize, or a copy CUDA makes
// synchronous) and is still waiting after 20 s aborts the process with
// what the stream is held by: on a GPU it would wait for good.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "services/cuda/driver_api.hpp"

namespace rdmx::cuda_sim {

using core::cuda::CUevent;
using core::cuda::CUresult;
using core::cuda::CUstream;

using StreamWork = std::function<CUresult()>;

CUstream create_stream(bool blocking);
void destroy_stream(CUstream stream);  // after its queued work has run
// Queues `work` on `stream` (null: the legacy default stream) and returns
// its place in the stream, which wait_for() takes. `what` names it in
// diagnostics.
std::uint64_t enqueue(CUstream stream, StreamWork work, std::string what);
// Waits until the stream has run its work up to `position`; `call` names
// the host call that waits.
void wait_for(CUstream stream, std::uint64_t position, const char* call);
// Waits for the work queued on the stream so far, leaving its errors for a synchronize.
void drain(CUstream stream, const char* call);
// Waits for the stream's queued work; returns the first error it met since the last synchronize.
CUresult synchronize(CUstream stream, const char* call);
// Waits for every stream of the process (cuCtxSynchronize).
CUresult synchronize_all(const char* call);

CUevent create_event();
void destroy_event(CUevent event);
CUresult record(CUevent event, CUstream stream);
CUresult query(CUevent event);  // success, or CUDA_ERROR_NOT_READY
CUresult synchronize_event(CUevent event);
CUresult wait_event(CUstream stream, CUevent event);
// Work that holds the stream until the 32-bit word at `address` (where the
// driver reads it) satisfies `flags` against `value`, as cuStreamWaitValue32
// does: GEQ, EQ, AND or NOR, with or without FLUSH.
CUresult wait_value(CUstream stream, const std::uint32_t* address, std::uint32_t value, unsigned flags);
// Work that stores `value` into the 32-bit word at `address` when the stream gets there.
CUresult write_value(CUstream stream, std::uint32_t* address, std::uint32_t value);

}  // namespace rdmx::cuda_sim
