// SPDX-License-Identifier: MIT
// Copies that involve device memory, as the engines need them: any two of
// host and device memory, on a stream of rdmx's own per GPU (never the
// application's or the legacy default stream, which would order the copy
// behind the application's kernels), returning once the bytes are in place.
// cuMemcpy alone would not do: between device buffers, and from pageable
// host memory to the device, it may return before the copy lands.
#pragma once

#include <cstddef>

namespace rdmx::core::cuda {

// `device`: the GPU whose copy engine runs it (that of the device-memory side).
void copy_memory(void* dst, const void* src, std::size_t bytes, int device, const char* op);

}  // namespace rdmx::core::cuda
