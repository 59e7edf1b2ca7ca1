// SPDX-License-Identifier: MIT
#include "core/settings.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/config.hpp"
#include "core/log.hpp"
#include "rdmx/error.hpp"

namespace rdmx::core {
namespace {

// Function-local, so settings registered during any library's static
// initialisation find it constructed.
std::vector<const Setting*>& registry() {
  static std::vector<const Setting*> settings;
  return settings;
}

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

std::string format_seconds(double ms) {
  char text[48];
  std::snprintf(text, sizeof text, "%g s", ms / 1000.0);
  return text;
}

bool same_word(const std::string& a, const char* b) {
  return a.size() == std::strlen(b) && std::equal(a.begin(), a.end(), b, [](char x, char y) {
           return std::toupper(static_cast<unsigned char>(x)) == std::toupper(static_cast<unsigned char>(y));
         });
}

}  // namespace

std::optional<std::chrono::milliseconds> parse_duration(const std::string& text) {
  const auto ms = parse_milliseconds(text);
  if (!ms || *ms < 0 || *ms > static_cast<double>(kMaxDuration.count())) return std::nullopt;
  return std::chrono::milliseconds(std::llround(*ms));
}

std::optional<std::size_t> parse_size(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  unsigned long long n = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str() || errno != 0) return std::nullopt;
  std::string unit(end);
  if (unit == "K" || unit == "k")
    n <<= 10;
  else if (unit == "M" || unit == "m")
    n <<= 20;
  else if (unit == "G" || unit == "g")
    n <<= 30;
  else if (!unit.empty())
    return std::nullopt;
  return static_cast<std::size_t>(n);
}

std::optional<std::string> Setting::raw() const { return env(name_); }

SettingRegistration::SettingRegistration(const Setting& setting) { registry().push_back(&setting); }

std::vector<const Setting*> registered_settings() {
  std::vector<const Setting*> list = registry();
  std::sort(list.begin(), list.end(),
            [](const Setting* a, const Setting* b) { return std::strcmp(a->name(), b->name()) < 0; });
  return list;
}

std::string format_duration(std::chrono::milliseconds ms) {
  if (ms.count() % 1000 == 0) return std::to_string(ms.count() / 1000) + "s";
  return std::to_string(ms.count()) + "ms";
}

std::string format_size(std::size_t bytes) {
  if (bytes != 0 && bytes % (1u << 30) == 0) return std::to_string(bytes >> 30) + "G";
  if (bytes != 0 && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + "M";
  if (bytes != 0 && bytes % (1u << 10) == 0) return std::to_string(bytes >> 10) + "K";
  return std::to_string(bytes);
}

// ---------------------------------------------------------------------------

std::chrono::milliseconds DurationSetting::read() const {
  const auto text = raw();
  if (!text) return fallback_;
  const std::string accepted = "accepted: seconds (\"30\", \"2.5s\") or milliseconds (\"500ms\") from " +
                               format_duration(min_) + " to 30 days (" + format_duration(kMaxDuration) + ")";
  const ErrorContext context{
      .op = "read settings",
      .hint = std::string("fix or unset ") + name() + " (default " + format_duration(fallback_) + ")"};
  const auto ms = parse_milliseconds(*text);
  if (!ms) {
    throw Error(ErrorCode::Config, std::string(name()) + "=\"" + *text + "\" is not a duration; " + accepted, context);
  }
  if (*ms < static_cast<double>(min_.count()) || *ms > static_cast<double>(kMaxDuration.count())) {
    throw Error(ErrorCode::Config,
                std::string(name()) + "=\"" + *text + "\" is out of range (" + format_seconds(*ms) + "); " + accepted,
                context);
  }
  return std::chrono::milliseconds(std::llround(*ms));
}

std::string DurationSetting::default_text() const { return format_duration(fallback_); }
std::string DurationSetting::value_text() const { return format_duration(read()); }

long long IntegerSetting::read() const {
  const auto text = raw();
  if (!text) return fallback_;
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text->c_str(), &end, 10);
  const bool number = end != text->c_str() && *end == '\0';
  if (!number || errno == ERANGE || value < min_ || value > max_) {
    throw Error(ErrorCode::Config,
                std::string(name()) + "=\"" + *text + "\" is " +
                    (number ? std::string("out of range") : std::string("not a number of ") + unit_) +
                    "; accepted: whole " + unit_ + " from " + std::to_string(min_) + " to " + std::to_string(max_),
                {.op = "read settings",
                 .hint = std::string("fix or unset ") + name() + " (default " + std::to_string(fallback_) + ")"});
  }
  return value;
}

std::size_t SizeSetting::read() const {
  const auto text = raw();
  if (!text) return std::min(fallback_, cap_);
  if (auto n = parse_size(*text)) return std::min(*n, cap_);
  RDMX_WARN("%s=%s is not a size (e.g. 4096, 16K, 4M); using %s", name(), text->c_str(),
            format_size(std::min(fallback_, cap_)).c_str());
  return std::min(fallback_, cap_);
}

std::string SizeSetting::default_text() const { return format_size(fallback_); }
std::string SizeSetting::value_text() const { return format_size(read()); }

bool SizeSetting::ignored() const {
  const auto text = raw();
  return text && !parse_size(*text);
}

bool FlagSetting::read() const {
  const auto text = raw();
  if (!text) return fallback_;
  if (*text == "1") return true;
  if (*text == "0") return false;
  log(LogLevel::Warn, "ignoring %s=\"%s\": expected 0 or 1; using %d", name(), text->c_str(), fallback_ ? 1 : 0);
  return fallback_;
}

bool FlagSetting::ignored() const {
  const auto text = raw();
  return text && *text != "0" && *text != "1";
}

bool ChoiceSetting::ignored() const {
  const auto text = raw();
  if (!text) return false;
  for (const char* const* choice = choices_; *choice != nullptr; ++choice) {
    if (same_word(*text, *choice)) return false;
  }
  return true;
}

}  // namespace rdmx::core
