// SPDX-License-Identifier: MIT
#include "services/process.hpp"

#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace rdmx::core {

bool process_gone(int pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return false;
  char state = 0;
  // "pid (comm) state ...": the state follows the last ')'.
  char line[512];
  if (std::fgets(line, sizeof(line), f) != nullptr) {
    if (const char* close = std::strrchr(line, ')'); close != nullptr && close[1] == ' ') state = close[2];
  }
  std::fclose(f);
  return state == 'Z' || state == 'X';
}

}  // namespace rdmx::core
