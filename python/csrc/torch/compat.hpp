// SPDX-License-Identifier: MIT
// One source for torch 1.13 and torch >= 2.0: what differs between them.
//
// torch 1.13 has no per-device backends: a backend is a c10d::ProcessGroup
// subclass. From 2.0 it is a c10d::Backend, and torch wraps it in a
// ProcessGroup registered for the devices the backend names.
#pragma once

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
namespace rdmx::torch_backend {
using BackendBase = c10d::Backend;
}
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
namespace rdmx::torch_backend {
using BackendBase = c10d::ProcessGroup;
}
#endif
