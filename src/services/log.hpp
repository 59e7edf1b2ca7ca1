// SPDX-License-Identifier: MIT
// Logging, configured as NCCL's: RDMX_DEBUG=WARN|INFO|TRACE selects the level
// (default: warnings only), RDMX_DEBUG_FILE=path writes there instead of
// stderr (%h is replaced by the host name, %p by the pid).
#pragma once

#include <cstdarg>

namespace rdmx::core {

enum class LogLevel { None = 0, Warn = 1, Info = 2, Trace = 3 };

LogLevel log_level() noexcept;
inline bool log_enabled(LogLevel level) noexcept { return level <= log_level(); }
// printf-style; one line per call, prefixed "host:pid:tid [rank] RDMX LEVEL".
void log(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace rdmx::core

#define RDMX_LOG(level, ...)                                                     \
  do {                                                                           \
    if (::rdmx::core::log_enabled(level)) ::rdmx::core::log(level, __VA_ARGS__); \
  } while (0)
#define RDMX_WARN(...) RDMX_LOG(::rdmx::core::LogLevel::Warn, __VA_ARGS__)
#define RDMX_INFO(...) RDMX_LOG(::rdmx::core::LogLevel::Info, __VA_ARGS__)
#define RDMX_TRACE(...) RDMX_LOG(::rdmx::core::LogLevel::Trace, __VA_ARGS__)
