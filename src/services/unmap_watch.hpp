// SPDX-License-Identifier: MIT
// Tells whether memory was unmapped, remapped or had its pages dropped since
// it was watched: what a cache of page-pinning registrations needs to know
// before it reuses one (a freed buffer's address may come back from malloc
// with other pages behind it, while the old registration still pins the old
// ones).
//
// UCX (ucm) learns this by patching mmap/munmap/madvise in every loaded
// library; rdmx asks the kernel instead. A userfaultfd registered in
// write-protect mode, with nothing ever write-protected, reports
// UFFD_EVENT_UNMAP/REMOVE/REMAP for the watched pages and never takes their
// page faults. The kernel holds munmap/madvise/mremap until the event is
// read, and the reader thread reads and marks the watches under one lock,
// so a caller that takes that lock (read_unmap_events) after such a call
// returned sees its mark.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace rdmx::core {

class UnmapWatcher;

class UnmapWatch {
 public:
  ~UnmapWatch();
  UnmapWatch(const UnmapWatch&) = delete;
  UnmapWatch& operator=(const UnmapWatch&) = delete;

  // True once any page of the range was unmapped, remapped or dropped
  // (MADV_DONTNEED/REMOVE/FREE), as of the last read_unmap_events(); always
  // true in a child process after fork (the child's pages are not watched).
  bool unmapped() const;

  // unmapped() as of now: true once any page of the range was unmapped,
  // remapped or dropped by a call that returned before this one started.
  // Without a system call, and without a lock unless the reader is
  // handling events at that moment.
  bool unmapped_now() const;

  // From now on, the moment the range is seen unmapped (at once if it
  // already was), `word` is set to 0: a liveness word that other processes
  // read before they copy into the range themselves. The word must outlive
  // this watch.
  void clear_on_unmap(std::atomic<std::uint32_t>* word);

 private:
  friend class UnmapWatcher;
  UnmapWatch(UnmapWatcher* owner, std::uintptr_t start, std::uintptr_t end) : owner_(owner), start_(start), end_(end) {}

  UnmapWatcher* owner_;         // never destroyed; its pid() tells a forked child it is the parent's
  std::uintptr_t start_, end_;  // page-aligned
  std::atomic<bool> unmapped_{false};
  std::atomic<std::uint32_t>* clear_ = nullptr;  // under the watcher's lock
  UnmapWatch* prev_ = nullptr;                   // the watcher's list: linking allocates nothing
  UnmapWatch* next_ = nullptr;
};

struct WatchResult {
  std::unique_ptr<UnmapWatch> watch;  // null when the range cannot be watched
  std::string why_not;                // then: the reason, e.g. "a file mapping"
};

// Starts watching the pages that hold [addr, addr + length).
WatchResult watch_unmapping(const void* addr, std::size_t length);

// After it returns, every munmap/mremap/madvise that had returned before it
// was called shows in unmapped(). Costs an uncontended lock, no system call.
void read_unmap_events();

// Whether this process can watch at all; `how` names the mechanism, or says
// why not with a hint (e.g. a seccomp profile that refuses userfaultfd).
struct UnmapWatchSupport {
  bool available = false;
  std::string how;
};
UnmapWatchSupport unmap_watch_support();

}  // namespace rdmx::core
