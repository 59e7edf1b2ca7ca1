// SPDX-License-Identifier: MIT
// What ThreadSanitizer cannot see, said to it. A provider's engine thread
// places a peer's WRITE (or a SEND's payload, or a READ's answer) into this
// process's memory; the application learns that it landed out of band (a
// message from the peer, a store key), often through another process, and
// then reads the memory. The ordering is real but crosses processes, so TSan
// would report the read as a race with the placement, and the next
// placement as a race with the read. Providers acquire the token below
// before they handle a peer's request and release it after every
// placement, before anything acknowledges it; code that reads placed
// memory on such out-of-band word acquires it before and releases it after.
// Outside TSan builds both are empty.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define RDMX_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RDMX_TSAN 1
#endif
#endif

#if defined(RDMX_TSAN)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace rdmx::core {

// One address for the library and the programs linked to it (a function, so
// a copy of an inline variable in each cannot split it).
void* remote_placement_token() noexcept;

#if defined(RDMX_TSAN)
inline void release_remote_placements() noexcept { __tsan_release(remote_placement_token()); }
inline void acquire_remote_placements() noexcept { __tsan_acquire(remote_placement_token()); }
#else
inline void release_remote_placements() noexcept {}
inline void acquire_remote_placements() noexcept {}
#endif

}  // namespace rdmx::core
