// SPDX-License-Identifier: MIT
// The GPU reduction kernels (reduce_kernels.cu) as the collectives call
// them. nvcc compiles them at build time into a fat binary embedded in
// librdmx; on first use on a GPU it is loaded into that GPU's primary
// context through the driver API, so nothing links against CUDA.
#pragma once

#include <cstddef>
#include <string>

#include "rdmx/comm.hpp"
#include "services/cuda/driver_api.hpp"

namespace rdmx::coll {

// Whether this build has the kernels (nvcc was found at configure time).
bool cuda_kernels_built() noexcept;
// Their GPU architectures, or why they were not built.
std::string cuda_kernels_note();

// dst[i] = a[i] (op) b[i] for i < count on the GPU that holds dst, ordered
// on `stream` (null: the legacy default stream); returns once queued, as a
// kernel launch does. Same bits as coll::reduce on the CPU. Throws
// NotSupported without kernels or a driver, InvalidArgument for a bad type
// or op or for memory that is not on a GPU.
void cuda_reduce(void* dst, const void* a, const void* b, std::size_t count, DataType type, ReduceOp op,
                 core::cuda::CUstream stream);
// dst[i] = dst[i] / divisor on the GPU, as coll::divide; floating types only.
void cuda_divide(void* dst, std::size_t count, DataType type, int divisor, core::cuda::CUstream stream);

}  // namespace rdmx::coll
