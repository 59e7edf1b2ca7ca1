// SPDX-License-Identifier: MIT
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cli/commands.hpp"
#include "rdmx/error.hpp"

namespace rdmx::cli {
namespace {
std::vector<std::string>& args() {
  static std::vector<std::string> stored;
  return stored;
}
}  // namespace

void set_invocation(int argc, char** argv) { args().assign(argv + 1, argv + argc); }
const std::vector<std::string>& invocation_args() { return args(); }

std::string self_executable() {
  char path[4096];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) {
    throw Error(ErrorCode::System, std::string("cannot read /proc/self/exe: ") + std::strerror(errno),
                {.op = "rdmx", .hint = "start the ranks with rdmx run -n N -- rdmx ..."});
  }
  return std::string(path, static_cast<std::size_t>(n));
}

}  // namespace rdmx::cli
