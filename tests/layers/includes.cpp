// SPDX-License-Identifier: MIT
// Compiled by the Layers.* tests (tests/CMakeLists.txt) with one layer's
// include path (build/layers/<layer>): an include that points down builds,
// one that points up or sideways must not find its header.
#if RDMX_CASE == 0
#include "services/log.hpp"  // coll over services
#elif RDMX_CASE == 1
#include "coll/selection.hpp"  // services reaching up to coll
#elif RDMX_CASE == 2
#include "providers/shm/ring.hpp"  // tcp reaching sideways into shm
#elif RDMX_CASE == 3
#include "providers/tcp/tcp_factory.hpp"  // the front door naming a provider
#elif RDMX_CASE == 4
#include "driver/memory_registry.hpp"  // collectives below the public API
#endif

int main() { return 0; }
