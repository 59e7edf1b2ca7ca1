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
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
extern "C" void AnnotateIgnoreWritesBegin(const char* file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char* file, int line);
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

// Accesses that race a provider's copy on purpose, as a CPU races a NIC's
// DMA: a peek at an inbox slot's header before its last word says the
// message landed (the value only decides whether to look further; nothing
// is trusted before the last word's acquire), and stores to the progress
// block that peers READ while they run (a READ sees the old or the new
// value, and the readers allow for both). TSan ignores the accesses in the
// scope; the release and acquire around them are still checked.
class RacingPlacementScope {
 public:
#if defined(RDMX_TSAN)
  RacingPlacementScope() noexcept {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
  }
  ~RacingPlacementScope() {
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
  }
#else
  // Not trivial, so a scope that does nothing outside TSan is not "unused".
  RacingPlacementScope() noexcept {}
  ~RacingPlacementScope() {}
#endif
  RacingPlacementScope(const RacingPlacementScope&) = delete;
  RacingPlacementScope& operator=(const RacingPlacementScope&) = delete;
};

}  // namespace rdmx::core
