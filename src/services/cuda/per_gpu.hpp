// SPDX-License-Identifier: MIT
// State rdmx keeps once per GPU for the life of the process (a retained
// primary context, a copy stream, a loaded module), made on first use.
// Kept for good: releasing a primary context or unloading a module at exit
// would race the application's own teardown of the CUDA runtime.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "rdmx/error.hpp"
#include "services/mutex.hpp"

namespace rdmx::core::cuda {

template <class T>
class PerGpu {
 public:
  // The state of GPU `device`, made by make() (which may throw, leaving
  // nothing behind) the first time it is asked for.
  template <class Make>
  T& get(int device, const char* op, Make&& make) {
    if (device < 0) {
      throw Error(ErrorCode::InvalidArgument, "negative GPU ordinal",
                  {.op = op, .sizes = "gpu=" + std::to_string(device)});
    }
    LockGuard lock(mutex_);
    auto it = slots_.find(device);
    if (it == slots_.end()) it = slots_.emplace(device, std::make_unique<T>(make())).first;
    return *it->second;
  }

 private:
  Mutex mutex_;
  std::map<int, std::unique_ptr<T>> slots_ RDMX_GUARDED_BY(mutex_);
};

}  // namespace rdmx::core::cuda
