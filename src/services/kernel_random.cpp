// SPDX-License-Identifier: MIT
#include "services/kernel_random.hpp"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "rdmx/error.hpp"

namespace rdmx::core {

std::uint64_t kernel_random64() {
  std::uint64_t value = 0;
  auto* out = reinterpret_cast<unsigned char*>(&value);
  std::size_t got = 0;
  while (got < sizeof value) {
    const ssize_t n = ::getrandom(out + got, sizeof value - got, 0);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      throw Error(
          ErrorCode::System, std::string("getrandom() failed: ") + std::strerror(errno),
          {.op = "kernel_random64", .hint = "rdmx takes memory keys and nonces from the kernel's random source"});
    }
  }
  return value;
}

}  // namespace rdmx::core
