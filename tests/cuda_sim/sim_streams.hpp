// SPDX-License-Identifier: MIT
// The simulated driver's streams and events, asynchronous as a GPU's: work
// queued on a stream runs later, in order, on a thread of the stream's own,
// so code that forgets to wait for a stream, or orders work wrongly across
// streams, reads stale data here as it would on a GPU. The null stream runs
// work at once, on the caller's thread.
#pragma once

#include <cstdint>
#include <functional>

#include "core/cuda/driver_api.hpp"

namespace rdmx::cuda_sim {

using core::cuda::CUevent;
using core::cuda::CUresult;
using core::cuda::CUstream;

using StreamWork = std::function<CUresult()>;

CUstream create_stream();
void destroy_stream(CUstream stream);  // after its queued work has run
CUresult enqueue(CUstream stream, StreamWork work);
// Waits for the stream's queued work; returns the first error it met since the last synchronize.
CUresult synchronize(CUstream stream);

CUevent create_event();
void destroy_event(CUevent event);
CUresult record(CUevent event, CUstream stream);
CUresult query(CUevent event);  // success, or CUDA_ERROR_NOT_READY
CUresult synchronize_event(CUevent event);
CUresult wait_event(CUstream stream, CUevent event);
// Work that holds the stream until the 32-bit word at `address` (host
// memory) satisfies `flags` against `value`, as cuStreamWaitValue32 does.
CUresult wait_value(CUstream stream, const std::uint32_t* address, std::uint32_t value, unsigned flags);

}  // namespace rdmx::cuda_sim
