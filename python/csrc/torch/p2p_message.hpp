// SPDX-License-Identifier: MIT
// What goes before each tagged message's payload (backend_p2p*.cpp).
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>

namespace rdmx::torch_backend {

struct Header {
  std::int64_t tag = 0;
  std::uint64_t bytes = 0;
};

inline std::size_t byte_size(const at::Tensor& t) { return static_cast<std::size_t>(t.numel()) * t.element_size(); }

}  // namespace rdmx::torch_backend
