#include "core/config.hpp"

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cmath>

#include "core/log.hpp"

namespace rdmx::core {
namespace {
std::atomic<int> g_rank{-1};
// Long enough that a progress engine receiving a stream does not fall asleep
// between messages (a wake-up costs ~35 us here): 64 KiB WRITE streams went
// from ~1.7 to ~3-5 GB/s when this rose from 50 to 200 us.
constexpr int kDefaultSpinUs = 200;

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

std::chrono::microseconds spin_budget() {
  static const auto value = [] {
    auto text = env("RDMX_SPIN_US");
    if (!text) return std::chrono::microseconds(kDefaultSpinUs);
    char* end = nullptr;
    long us = std::strtol(text->c_str(), &end, 10);
    if (*end != '\0' || us < 0) {
      log(LogLevel::Warn, "ignoring RDMX_SPIN_US=\"%s\": expected microseconds; using %d", text->c_str(), kDefaultSpinUs);
      return std::chrono::microseconds(kDefaultSpinUs);
    }
    return std::chrono::microseconds(us);
  }();
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
