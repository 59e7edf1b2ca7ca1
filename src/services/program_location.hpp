// SPDX-License-Identifier: MIT
// Where this process's program is, asked from another thread of it while
// the program may be blocked, busy, or holding any lock: for reports that
// name what a stalled rank is doing. In a Python interpreter it is the
// Python stack of every thread, read as faulthandler reads it (no
// interpreter lock is taken, so a thread that holds it cannot block the
// report); elsewhere, what the kernel says the main thread waits in.
#pragma once

#include <string>

namespace rdmx::core {

struct ProgramLocation {
  // "python" (a Python stack), "kernel" (the main thread's wait channel and
  // state), or "" when nothing could be read.
  std::string kind;
  // The Python stacks as faulthandler prints them (most recent call first),
  // or "sleeping in hrtimer_nanosleep"; at most a few KiB.
  std::string text;
  // For a Python stack: innermost_program_frame of the main thread.
  std::string innermost;
};

// Never throws and never waits for another thread.
ProgramLocation program_location() noexcept;

// From a faulthandler dump of every thread: the main thread's stack (the
// last one listed: the interpreter lists its newest thread first).
std::string main_thread_stack(const std::string& dump);
// Its innermost frame in the program's own code, as "train.py:33 in
// load_batch": the first not in an installed package or the standard
// library (torch's data loader, threading), else the innermost of all.
std::string innermost_program_frame(const std::string& stack);

}  // namespace rdmx::core
