// SPDX-License-Identifier: MIT
#include "services/log.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "services/config.hpp"
#include "services/mutex.hpp"
#include "services/settings.hpp"

namespace rdmx::core {
namespace {

std::string level_in_force();
constexpr const char* kLevelNames[] = {"WARN", "INFO", "TRACE", "NONE", "OFF", nullptr};
constexpr ChoiceSetting kDebug{"RDMX_DEBUG", "WARN", kLevelNames,
                               "log level: WARN (warnings only), INFO, TRACE or NONE", level_in_force};
RDMX_SETTING(kDebug);
constexpr TextSetting kDebugFile{"RDMX_DEBUG_FILE", "stderr",
                                 "log to this file instead of stderr (%h: the host name, %p: the pid)"};
RDMX_SETTING(kDebugFile);

struct Sink {
  LogLevel level = LogLevel::Warn;
  FILE* file = stderr;
  std::string host;
  Mutex mutex;

  Sink() {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    host = name;
    if (const auto text = kDebug.raw()) {
      std::string value(*text);
      for (auto& c : value) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      if (value == "WARN")
        level = LogLevel::Warn;
      else if (value == "INFO")
        level = LogLevel::Info;
      else if (value == "TRACE")
        level = LogLevel::Trace;
      else if (value == "NONE" || value == "OFF")
        level = LogLevel::None;
      else
        std::fprintf(stderr, "rdmx: ignoring RDMX_DEBUG=\"%s\" (expected WARN, INFO or TRACE)\n", text->c_str());
    }
    if (const auto pattern = kDebugFile.read()) {
      std::string path;
      for (const char* p = pattern->c_str(); *p != '\0'; ++p) {
        if (p[0] == '%' && p[1] == 'h') {
          path += host;
          ++p;
        } else if (p[0] == '%' && p[1] == 'p') {
          path += std::to_string(getpid());
          ++p;
        } else
          path += *p;
      }
      if (FILE* f = std::fopen(path.c_str(), "a")) {
        file = f;
        setvbuf(file, nullptr, _IOLBF, 0);
      } else {
        std::fprintf(stderr, "rdmx: cannot open RDMX_DEBUG_FILE=\"%s\": %s; logging to stderr\n", path.c_str(),
                     std::strerror(errno));
      }
    }
  }
};

Sink& sink() {
  static Sink instance;
  return instance;
}

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::Warn: return "WARN";
    case LogLevel::Info: return "INFO";
    case LogLevel::Trace: return "TRACE";
    case LogLevel::None: return "NONE";
  }
  return "";
}

std::string level_in_force() { return level_name(sink().level); }

}  // namespace

LogLevel log_level() noexcept { return sink().level; }

void log(LogLevel level, const char* format, ...) {
  Sink& s = sink();
  char body[2048];
  va_list args;
  va_start(args, format);
  std::vsnprintf(body, sizeof(body), format, args);
  va_end(args);
  LockGuard lock(s.mutex);
  std::fprintf(s.file, "%s:%d:%ld [%d] RDMX %s %s\n", s.host.c_str(), getpid(), static_cast<long>(syscall(SYS_gettid)),
               current_rank(), level_name(level), body);
  std::fflush(s.file);
}

}  // namespace rdmx::core
