// SPDX-License-Identifier: MIT
#include "core/config.hpp"

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/log.hpp"
#include "rdmx/error.hpp"

namespace rdmx::core {
namespace {
std::atomic<int> g_rank{-1};
// Long enough that a progress engine receiving a stream does not fall asleep
// between messages (a wake-up costs ~35 us here): 64 KiB WRITE streams went
// from ~1.7 to ~3-5 GB/s when this rose from 50 to 200 us.
constexpr int kDefaultSpinUs = 200;

// A duration as written, in milliseconds, kept as a double so that "1e17"
// stays a number to report rather than overflowing; nullopt when the text is
// not a duration at all.
std::optional<double> parse_milliseconds(const std::string& text) {
  char* end = nullptr;
  const double number = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !std::isfinite(number)) return std::nullopt;
  const std::string unit(end);
  if (unit.empty() || unit == "s") return number * 1000.0;
  if (unit == "ms") return number;
  return std::nullopt;
}

std::string format_ms(std::chrono::milliseconds ms) {
  if (ms.count() % 1000 == 0) return std::to_string(ms.count() / 1000) + "s";
  return std::to_string(ms.count()) + "ms";
}

std::string format_seconds(double ms) {
  char text[48];
  std::snprintf(text, sizeof text, "%g s", ms / 1000.0);
  return text;
}

// The value of a duration setting; see config.hpp for why a bad one throws.
std::chrono::milliseconds duration_from_env(const char* name, std::chrono::milliseconds fallback,
                                            std::chrono::milliseconds min) {
  auto text = env(name);
  if (!text) return fallback;
  const std::string accepted = "accepted: seconds (\"30\", \"2.5s\") or milliseconds (\"500ms\") from " +
                               format_ms(min) + " to 30 days (" + format_ms(kMaxDuration) + ")";
  const ErrorContext context{.op = "read settings",
                             .hint = std::string("fix or unset ") + name + " (default " + format_ms(fallback) + ")"};
  const auto ms = parse_milliseconds(*text);
  if (!ms) {
    throw Error(ErrorCode::Config, std::string(name) + "=\"" + *text + "\" is not a duration; " + accepted, context);
  }
  if (*ms < static_cast<double>(min.count()) || *ms > static_cast<double>(kMaxDuration.count())) {
    throw Error(ErrorCode::Config,
                std::string(name) + "=\"" + *text + "\" is out of range (" + format_seconds(*ms) + "); " + accepted,
                context);
  }
  return std::chrono::milliseconds(std::llround(*ms));
}
}  // namespace

std::optional<std::string> env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::optional<std::chrono::milliseconds> parse_duration(const std::string& text) {
  const auto ms = parse_milliseconds(text);
  if (!ms || *ms < 0 || *ms > static_cast<double>(kMaxDuration.count())) return std::nullopt;
  return std::chrono::milliseconds(std::llround(*ms));
}

std::chrono::milliseconds read_timeout() {
  return duration_from_env("RDMX_TIMEOUT", std::chrono::seconds(60), std::chrono::milliseconds(1));
}

std::chrono::milliseconds read_rnr_timeout() {
  return duration_from_env("RDMX_RNR_TIMEOUT", std::chrono::seconds(1), std::chrono::milliseconds(0));
}

// A static whose initialiser throws is initialised again on the next call, so
// a bad value fails every call, never just the first.
std::chrono::milliseconds timeout() {
  static const auto value = read_timeout();
  return value;
}

std::chrono::milliseconds rnr_timeout() {
  static const auto value = read_rnr_timeout();
  return value;
}

bool registration_cache_enabled() {
  static const bool value = [] {
    auto text = env("RDMX_REGISTRATION_CACHE");
    if (!text || *text == "1") return true;
    if (*text == "0") return false;
    log(LogLevel::Warn, "ignoring RDMX_REGISTRATION_CACHE=\"%s\": expected 0 or 1; using 1", text->c_str());
    return true;
  }();
  return value;
}

std::chrono::microseconds read_spin_budget() {
  auto text = env("RDMX_SPIN_US");
  if (!text) return std::chrono::microseconds(kDefaultSpinUs);
  char* end = nullptr;
  errno = 0;
  const long long us = std::strtoll(text->c_str(), &end, 10);
  const bool number = end != text->c_str() && *end == '\0';
  if (!number || errno == ERANGE || us < 0 || us > kMaxSpin.count()) {
    throw Error(ErrorCode::Config,
                "RDMX_SPIN_US=\"" + *text + "\" is " + (number ? "out of range" : "not a number of microseconds") +
                    "; accepted: whole microseconds from 0 to " + std::to_string(kMaxSpin.count()) + " (1 s)",
                {.op = "read settings",
                 .hint = "fix or unset RDMX_SPIN_US (default " + std::to_string(kDefaultSpinUs) + ")"});
  }
  return std::chrono::microseconds(us);
}

std::chrono::microseconds spin_budget() {
  static const auto value = read_spin_budget();
  return value;
}

int current_rank() noexcept { return g_rank.load(std::memory_order_relaxed); }
void set_current_rank(int rank) noexcept { g_rank.store(rank, std::memory_order_relaxed); }

std::optional<std::size_t> parse_size(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  unsigned long long n = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str() || errno != 0) return std::nullopt;
  std::string unit(end);
  if (unit == "K" || unit == "k") n <<= 10;
  else if (unit == "M" || unit == "m") n <<= 20;
  else if (unit == "G" || unit == "g") n <<= 30;
  else if (!unit.empty()) return std::nullopt;
  return static_cast<std::size_t>(n);
}

std::size_t env_size(const char* name, std::size_t fallback) {
  auto value = env(name);
  if (!value) return fallback;
  if (auto n = parse_size(*value)) return *n;
  RDMX_WARN("%s=%s is not a size (e.g. 4096, 16K, 4M); using %zu", name, value->c_str(), fallback);
  return fallback;
}

}  // namespace rdmx::core
