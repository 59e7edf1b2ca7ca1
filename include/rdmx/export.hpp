// SPDX-License-Identifier: MIT
// What librdmx.so exports: the library is built with -fvisibility=hidden,
// so only what the public headers declare between RDMX_API_BEGIN and
// RDMX_API_END (every header in include/rdmx does so for all it declares)
// is visible to programs; the layers' internals stay inside the library.
#pragma once

#define RDMX_API_BEGIN _Pragma("GCC visibility push(default)")
#define RDMX_API_END _Pragma("GCC visibility pop")
// On a public header's forward declaration of an internal type (a pimpl, a
// friend), whose members the library must not export.
#define RDMX_INTERNAL __attribute__((visibility("hidden")))
