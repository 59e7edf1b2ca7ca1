// SPDX-License-Identifier: MIT
// Sets (or, with nullptr, unsets) one environment variable for a scope and
// puts the old value back (ctest sets RDMX_TIMEOUT, a test may run under a
// launcher).
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace rdmx::test {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace rdmx::test
