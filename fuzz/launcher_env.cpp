// SPDX-License-Identifier: MIT
// Fuzz target: what launchers put in the environment. Each input line
// "<i>=<value>" sets the i-th variable rdmx reads (rank, world size, store,
// torchrun's, Open MPI's, MPICH's and Slurm's) to the value; then
// detect_launch() must either describe a job whose numbers make sense or
// throw rdmx::Error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "bootstrap/launch_variables.hpp"
#include "rdmx/bootstrap.hpp"
#include "rdmx/error.hpp"

namespace {

const auto& kVariables = rdmx::bootstrap::kLaunchVariables;
constexpr std::size_t kCount = sizeof(kVariables) / sizeof(kVariables[0]);

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  for (const char* name : kVariables) ::unsetenv(name);
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::size_t start = 0;
  while (start < input.size()) {
    std::size_t end = input.find('\n', start);
    if (end == std::string::npos) end = input.size();
    const std::string line = input.substr(start, end - start);
    start = end + 1;
    if (line.size() < 2 || line[1] != '=') continue;
    const std::string value = line.substr(2);
    if (value.find('\0') != std::string::npos) continue;  // the environment cannot hold it
    ::setenv(kVariables[static_cast<unsigned char>(line[0]) % kCount], value.c_str(), 1);
  }
  try {
    const rdmx::LaunchInfo info = rdmx::detect_launch();
    if (info.world_size < 1 || info.rank < 0 || info.rank >= info.world_size) __builtin_trap();
    if (info.local_rank >= 0 && info.local_world_size >= 0 && info.local_rank >= info.local_world_size)
      __builtin_trap();
  } catch (const rdmx::Error&) {
  }
  return 0;
}
