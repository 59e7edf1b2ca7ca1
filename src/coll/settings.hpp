// SPDX-License-Identifier: MIT
// The RDMX_COLL_* settings (declared in settings.cpp), read together when a
// communicator is created.
#pragma once

#include <cstddef>

namespace rdmx::coll {

struct CollSettings {
  std::size_t buffsize;     // RDMX_COLL_BUFFSIZE: inbox bytes per peer
  std::size_t slots;        // RDMX_COLL_SLOTS: inbox slots per peer
  std::size_t stage_limit;  // RDMX_COLL_STAGE_LIMIT: payloads up to this are copied
  std::size_t direct_min;   // RDMX_COLL_DIRECT_MIN: direct transfers from this size on (0: off)
};

// Reads the environment now; a malformed or out-of-range value throws Error(Config).
CollSettings coll_settings();

struct LinksConfig;  // links.hpp
// The buffers' shape (slots and chunk) from the settings above.
LinksConfig links_config();

}  // namespace rdmx::coll
