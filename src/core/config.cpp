#include "core/config.hpp"

#include <atomic>
#include <cstdlib>
#include <cmath>

#include "core/log.hpp"

namespace rdmx::core {
namespace {
std::atomic<int> g_rank{-1};

std::chrono::milliseconds duration_from_env(const char* name, std::chrono::milliseconds fallback) {
  auto text = env(name);
  if (!text) return fallback;
  auto parsed = parse_duration(*text);
  if (!parsed) {
    log(LogLevel::Warn, "ignoring %s=\"%s\": expected seconds (\"30\", \"2.5s\") or \"500ms\"; using %lld ms",
        name, text->c_str(), static_cast<long long>(fallback.count()));
    return fallback;
  }
  return *parsed;
}
}  // namespace

std::optional<std::string> env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::optional<std::chrono::milliseconds> parse_duration(const std::string& text) {
  char* end = nullptr;
  double number = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !std::isfinite(number) || number < 0) return std::nullopt;
  std::string unit(end);
  double ms;
  if (unit.empty() || unit == "s") {
    ms = number * 1000.0;
  } else if (unit == "ms") {
    ms = number;
  } else {
    return std::nullopt;
  }
  return std::chrono::milliseconds(static_cast<long long>(std::llround(ms)));
}

std::chrono::milliseconds timeout() {
  static const auto value = duration_from_env("RDMX_TIMEOUT", std::chrono::seconds(60));
  return value;
}

std::chrono::milliseconds rnr_timeout() {
  static const auto value = duration_from_env("RDMX_RNR_TIMEOUT", std::chrono::seconds(1));
  return value;
}

std::chrono::microseconds spin_budget() {
  static const auto value = [] {
    auto text = env("RDMX_SPIN_US");
    if (!text) return std::chrono::microseconds(50);
    char* end = nullptr;
    long us = std::strtol(text->c_str(), &end, 10);
    if (*end != '\0' || us < 0) {
      log(LogLevel::Warn, "ignoring RDMX_SPIN_US=\"%s\": expected microseconds; using 50", text->c_str());
      return std::chrono::microseconds(50);
    }
    return std::chrono::microseconds(us);
  }();
  return value;
}

int current_rank() noexcept { return g_rank.load(std::memory_order_relaxed); }
void set_current_rank(int rank) noexcept { g_rank.store(rank, std::memory_order_relaxed); }

}  // namespace rdmx::core
