// SPDX-License-Identifier: MIT
// The CUDA driver, loaded once per process with dlopen (libcuda.so.1):
// rdmx has no link-time dependency on CUDA, and where no driver is
// installed it runs as it does without GPUs, saying why in `rdmx info`.
#pragma once

#include <string>

#include "rdmx/error.hpp"
#include "services/cuda/driver_api.hpp"

namespace rdmx::core::cuda {

struct DriverLoad {
  const DriverApi* api = nullptr;  // null: no usable driver; `reason` says why
  std::string reason;
  int version = 0;  // cuDriverGetVersion: 13000 for CUDA 13.0
  int devices = 0;
};

// Loads and initialises the driver (cuInit) on first use; later calls return
// the same result. Thread-safe.
const DriverLoad& load_driver();

// The driver if this process has already loaded it (an application that
// allocated device memory has), without loading it otherwise: a pointer can
// be device memory only in a process where the driver runs, so host-only
// processes never pay for loading CUDA.
const DriverApi* driver_if_loaded();

// "CUDA_ERROR_INVALID_VALUE (invalid argument)" for a driver result.
std::string describe(const DriverApi& api, CUresult result);

// Throws Error(System) naming `call` and what the driver said, unless result is success.
void check(const DriverApi& api, CUresult result, const char* call, const ErrorContext& where);

// The driver for code that needs one, or Error(Unsupported) with load_driver()'s reason.
const DriverApi& require_driver(const char* op);

}  // namespace rdmx::core::cuda
