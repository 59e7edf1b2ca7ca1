// SPDX-License-Identifier: MIT
#include "services/race_annotations.hpp"

namespace rdmx::core {

void* remote_placement_token() noexcept {
  static char token;
  return &token;
}

}  // namespace rdmx::core
