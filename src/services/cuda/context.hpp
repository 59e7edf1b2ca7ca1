// SPDX-License-Identifier: MIT
// The CUDA context rdmx works in: each GPU's primary context, the one the
// CUDA runtime (and so PyTorch) uses, made current around driver calls and
// put back afterwards so the application's own current context is kept.
#pragma once

#include <string>

#include "services/cuda/driver.hpp"

namespace rdmx::core::cuda {

// GPU `device`'s primary context, retained for the life of the process
// (retaining again is free; releasing would tear down the application's).
CUcontext primary_context(const DriverApi& api, int device);

// The ordinal of the GPU with PCI bus id `bus_id` ("0000:65:00.0"), as this
// process numbers them (CUDA_VISIBLE_DEVICES may differ between processes);
// -1 when this process has no such GPU.
int device_by_bus_id(const DriverApi& api, const std::string& bus_id);
std::string bus_id_of(const DriverApi& api, int device);

// Makes `context` current on this thread until destroyed.
class ContextScope {
 public:
  ContextScope(const DriverApi& api, CUcontext context);
  ~ContextScope();
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  const DriverApi& api_;
  CUcontext saved_ = nullptr;
  bool switched_ = false;
};

}  // namespace rdmx::core::cuda
