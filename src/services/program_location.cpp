// SPDX-License-Identifier: MIT
#include "services/program_location.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace rdmx::core {
namespace {

// What faulthandler calls from its watchdog thread and signal handlers: it
// reads every thread's frames without the interpreter lock. Found at run
// time, so that the library needs no Python: only an interpreter has it.
using DumpTracebacks = const char* (*)(int fd, void* interp, void* current_tstate);

constexpr std::size_t kMaxText = 8192;

std::string read_all(int fd) {
  std::string text;
  char buf[4096];
  if (::lseek(fd, 0, SEEK_SET) != 0) return text;
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > 4 * kMaxText) break;
  }
  return text;
}

using Predicate = int (*)();

// Not before the interpreter is up, nor while it is being torn down (its
// thread states are freed then): faulthandler stops its watchdog there too.
bool interpreter_running() {
  static const auto initialized = reinterpret_cast<Predicate>(::dlsym(RTLD_DEFAULT, "Py_IsInitialized"));
  static const auto finalizing = [] {
    void* f = ::dlsym(RTLD_DEFAULT, "Py_IsFinalizing");  // 3.13 on
    return reinterpret_cast<Predicate>(f != nullptr ? f : ::dlsym(RTLD_DEFAULT, "_Py_IsFinalizing"));
  }();
  return initialized != nullptr && initialized() != 0 && (finalizing == nullptr || finalizing() == 0);
}

std::string python_dump() {
  static const auto dump = reinterpret_cast<DumpTracebacks>(::dlsym(RTLD_DEFAULT, "_Py_DumpTracebackThreads"));
  if (dump == nullptr || !interpreter_running()) return "";
  const int fd = ::memfd_create("rdmx-program-location", MFD_CLOEXEC);
  if (fd < 0) return "";
  const char* failed = dump(fd, nullptr, nullptr);
  std::string text = failed == nullptr ? read_all(fd) : "";
  ::close(fd);
  return text;
}

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The main thread's state and wait channel, as ps shows them.
std::string kernel_wait() {
  const std::string task = "/proc/self/task/" + std::to_string(::getpid());
  const std::string wchan = first_line(task + "/wchan");
  const std::string stat = first_line(task + "/stat");
  // stat: "pid (comm) S ...": the state follows the last ')'.
  const auto close = stat.rfind(')');
  const char state = close != std::string::npos && close + 2 < stat.size() ? stat[close + 2] : '?';
  const std::string word = state == 'R'   ? "running"
                           : state == 'S' ? "sleeping"
                           : state == 'D' ? "in uninterruptible wait"
                           : state == 'T' ? "stopped"
                                          : std::string("in state ") + state;
  std::string text = "main thread " + word;
  if (!wchan.empty() && wchan != "0") text += " in " + wchan;
  return text;
}

bool library_path(const std::string& path) {
  return path.find("/site-packages/") != std::string::npos || path.find("/dist-packages/") != std::string::npos ||
         path.find("/lib/python3") != std::string::npos || path.rfind("<frozen ", 0) == 0;
}

}  // namespace

std::string main_thread_stack(const std::string& dump) {
  // Blocks are "Thread 0x... (most recent call first):" or "Current thread
  // 0x...", then one "  File ..." line per frame.
  std::size_t last = std::string::npos;
  for (std::size_t at = 0; at < dump.size();) {
    const std::size_t end = dump.find('\n', at);
    const std::string line = dump.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (line.rfind("Thread 0x", 0) == 0 || line.rfind("Current thread 0x", 0) == 0) last = at;
    if (end == std::string::npos) break;
    at = end + 1;
  }
  if (last == std::string::npos) return "";
  std::string stack = dump.substr(last);
  while (!stack.empty() && (stack.back() == '\n' || stack.back() == ' ')) stack.pop_back();
  return stack;
}

std::string innermost_program_frame(const std::string& stack) {
  std::istringstream lines(stack);
  std::string first, own;
  for (std::string line; std::getline(lines, line);) {
    // '  File "train.py", line 33 in load_batch'
    const auto open = line.find("File \"");
    if (open == std::string::npos) continue;
    const auto close = line.find('"', open + 6);
    const auto at_line = line.find(", line ", close == std::string::npos ? open : close);
    if (close == std::string::npos || at_line == std::string::npos) continue;
    const std::string path = line.substr(open + 6, close - open - 6);
    std::string rest = line.substr(at_line + 7);  // "33 in load_batch"
    const auto in = rest.find(" in ");
    const std::string number = rest.substr(0, in);
    const std::string function = in == std::string::npos ? "?" : rest.substr(in + 4);
    const std::string frame = path + ":" + number + " in " + function;
    if (first.empty()) first = frame;
    if (!library_path(path)) {
      own = frame;
      break;
    }
  }
  return own.empty() ? first : own;
}

ProgramLocation program_location() noexcept {
  try {
    ProgramLocation where;
    const std::string dump = python_dump();
    if (!dump.empty()) {
      const std::string main_stack = main_thread_stack(dump);
      where.kind = "python";
      where.text = dump.size() > kMaxText ? main_stack.substr(0, kMaxText) : dump;
      where.innermost = innermost_program_frame(main_stack);
      return where;
    }
    where.text = kernel_wait();
    where.kind = "kernel";
    return where;
  } catch (...) {
    return {};
  }
}

}  // namespace rdmx::core
