// SPDX-License-Identifier: MIT
#include "coll/combine.hpp"

#include <cstring>

#include "coll/cuda/device_ops.hpp"
#include "coll/reduce.hpp"
#include "services/cuda/copy.hpp"

namespace rdmx::coll {

void Combine::copy(void* dst, const void* src, std::size_t bytes) const {
  if (dst == src || bytes == 0) return;
  if (device != nullptr) return core::cuda::copy_memory(dst, src, bytes, device->device(), "collective copy");
  std::memmove(dst, src, bytes);
}

void Combine::reduce(void* dst, const void* a, const void* b, std::size_t count) const {
  if (device != nullptr) return device->reduce(dst, a, b, false, count, type, op);
  host_reduce(dst, a, b, count);
}

void Combine::reduce_received(void* dst, const void* a, const void* message, std::size_t count) const {
  if (device != nullptr) return device->reduce(dst, a, message, true, count, type, op);
  host_reduce(dst, a, message, count);
}

void Combine::place_received(void* dst, const void* message, std::size_t bytes) const {
  if (device != nullptr) return core::cuda::copy_memory(dst, message, bytes, device->device(), "collective receive");
  std::memcpy(dst, message, bytes);
}

void Combine::finalize(void* dst, std::size_t count) const {
  if (avg_divisor == 0 || count == 0) return;
  if (device != nullptr) return device->divide(dst, count, type, avg_divisor);
  divide(dst, count, type, avg_divisor);
}

}  // namespace rdmx::coll
