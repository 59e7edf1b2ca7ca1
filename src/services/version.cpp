// SPDX-License-Identifier: MIT
// rdmx::version(): compiled into the library, so it reports the library a
// program runs with even when its headers came from another build.
#include "rdmx/version.hpp"

namespace rdmx {

const char* version() noexcept { return RDMX_VERSION_STRING; }

}  // namespace rdmx
