// SPDX-License-Identifier: MIT
#include "coll/settings.hpp"

#include "core/config.hpp"

namespace rdmx::coll {

CollSettings coll_settings() {
  return {.buffsize = core::env_size("RDMX_COLL_BUFFSIZE", std::size_t{4} << 20),
          .slots = core::env_size("RDMX_COLL_SLOTS", 16),
          .stage_limit = core::env_size("RDMX_COLL_STAGE_LIMIT", std::size_t{16} << 10),
          .direct_min = core::env_size("RDMX_COLL_DIRECT_MIN", 0)};
}

}  // namespace rdmx::coll
