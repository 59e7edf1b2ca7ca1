// SPDX-License-Identifier: MIT
// Where a program is, for stall reports: the main thread's frame in a
// faulthandler dump (the program's own file, not the interpreter's or a
// package's), and what the kernel says a native main thread waits in.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "services/program_location.hpp"

namespace rdmx::core {
namespace {

const char* kDump =
    "Thread 0x00007f04972666c0 (most recent call first):\n"
    "  File \"/usr/lib/python3.11/threading.py\", line 320 in wait\n"
    "  File \"/venv/lib/python3.11/site-packages/torch/utils/data/_utils/pin_memory.py\", line 52 in _pin_memory_loop\n"
    "\n"
    "Current thread 0x00007f0497bc5b80 (most recent call first):\n"
    "  File \"/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py\", line 1295 in _get_data\n"
    "  File \"/usr/lib/python3.11/selectors.py\", line 415 in select\n"
    "  File \"/home/me/train.py\", line 33 in load_batch\n"
    "  File \"/home/me/train.py\", line 71 in main\n"
    "  File \"<frozen runpy>\", line 88 in _run_code\n";

TEST(ProgramLocation, TheMainThreadIsTheLastOneListed) {
  const std::string stack = main_thread_stack(kDump);
  EXPECT_EQ(stack.rfind("Current thread 0x00007f0497bc5b80", 0), 0u) << stack;
  EXPECT_EQ(stack.find("pin_memory"), std::string::npos) << stack;
  EXPECT_EQ(main_thread_stack("no dump here"), "");
}

TEST(ProgramLocation, TheInnermostFrameIsTheProgramsOwnNotALibrarys) {
  EXPECT_EQ(innermost_program_frame(main_thread_stack(kDump)), "/home/me/train.py:33 in load_batch");
  // Only library frames: the innermost of them.
  EXPECT_EQ(innermost_program_frame("  File \"/usr/lib/python3.11/threading.py\", line 320 in wait\n"
                                    "  File \"/usr/lib/python3.11/threading.py\", line 600 in run\n"),
            "/usr/lib/python3.11/threading.py:320 in wait");
  EXPECT_EQ(innermost_program_frame(""), "");
}

// Not in an interpreter: the main thread's state and wait channel, read
// from another thread while the main one waits to join it.
TEST(ProgramLocation, ANativeMainThreadIsSaidToSleep) {
  ProgramLocation where;
  std::thread reader([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    where = program_location();
  });
  reader.join();
  EXPECT_EQ(where.kind, "kernel");
  EXPECT_EQ(where.text.rfind("main thread sleeping", 0), 0u) << where.text;
  EXPECT_EQ(where.innermost, "");
}

}  // namespace
}  // namespace rdmx::core
