// SPDX-License-Identifier: MIT
#include "services/settings.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "rdmx/error.hpp"
#include "services/config.hpp"

namespace rdmx::core {
namespace {

// Function-local, so settings registered during any library's static
// initialisation find it constructed.
std::vector<const Setting*>& registry() {
  static std::vector<const Setting*> settings;
  return settings;
}

// The end of the decimal number `p` begins with, as the settings document
// numbers: digits, then (where `fraction`) ".digits" and an exponent
// "e[+-]digits"; nullptr when `p` does not begin with one. strtod and strtoull would also take
// "0x10" (16), " +5", "-1" (2^64 - 1 for strtoull), "nan" and "infinity";
// a leading zero before another digit is refused too, so that "010" is not
// taken for 10 by one reader and 8 by another.
const char* decimal_end(const char* p, bool fraction) {
  auto digits = [](const char* q) {
    while (*q >= '0' && *q <= '9') ++q;
    return q;
  };
  const char* q = digits(p);
  if (q == p || (*p == '0' && q - p > 1)) return nullptr;
  if (!fraction) return q;
  if (*q == '.') {
    const char* f = digits(q + 1);
    if (f == q + 1) return nullptr;
    q = f;
  }
  if (*q == 'e' || *q == 'E') {
    const char* e = q + 1;
    if (*e == '+' || *e == '-') ++e;
    const char* x = digits(e);
    if (x == e) return nullptr;
    q = x;
  }
  return q;
}

// A duration as written, in milliseconds, kept as a double so that "1e17"
// stays a number to report rather than overflowing; nullopt when the text is
// not a duration at all. A sign is read only to report a negative duration
// as out of range.
std::optional<double> parse_milliseconds(const std::string& text) {
  const bool negative = !text.empty() && text[0] == '-';
  const char* begin = text.c_str() + (negative ? 1 : 0);
  const char* end = decimal_end(begin, true);
  if (end == nullptr) return std::nullopt;
  const double magnitude = std::strtod(begin, nullptr);
  if (!std::isfinite(magnitude)) return std::nullopt;
  const double number = negative ? -magnitude : magnitude;
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
  const char* end = decimal_end(text.c_str(), false);
  if (end == nullptr) return std::nullopt;
  errno = 0;
  const unsigned long long n = std::strtoull(text.c_str(), nullptr, 10);
  if (errno != 0) return std::nullopt;
  const std::string unit(end);
  int shift = 0;
  if (unit == "K" || unit == "k")
    shift = 10;
  else if (unit == "M" || unit == "m")
    shift = 20;
  else if (unit == "G" || unit == "g")
    shift = 30;
  else if (!unit.empty())
    return std::nullopt;
  if (n > (std::numeric_limits<std::size_t>::max() >> shift)) return std::nullopt;
  return static_cast<std::size_t>(n) << shift;
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
  const bool negative = (*text)[0] == '-';
  const char* end = decimal_end(text->c_str() + (negative ? 1 : 0), false);
  const bool number = end != nullptr && *end == '\0';
  errno = 0;
  const long long value = number ? std::strtoll(text->c_str(), nullptr, 10) : 0;
  if (!number || errno == ERANGE || value < min_ || value > max_) {
    throw Error(ErrorCode::Config,
                std::string(name()) + "=\"" + *text + "\" is " +
                    (number ? std::string("out of range") : std::string("not a number of ") + unit_) +
                    "; accepted: whole " + unit_ + " in decimal from " + std::to_string(min_) + " to " +
                    std::to_string(max_),
                {.op = "read settings",
                 .hint = std::string("fix or unset ") + name() + " (default " + std::to_string(fallback_) + ")"});
  }
  return value;
}

std::size_t SizeSetting::read() const {
  const auto text = raw();
  if (!text) return fallback_;
  const auto n = parse_size(*text);
  if (!n || *n < min_ || *n > max_) {
    throw Error(ErrorCode::Config,
                std::string(name()) + "=\"" + *text + "\" is " + (n ? "out of range" : "not a size") +
                    "; accepted: bytes in decimal, with K, M or G for KiB, MiB or GiB (\"4096\", \"16K\", \"4M\"), "
                    "from " +
                    format_size(min_) + " to " + format_size(max_),
                {.op = "read settings",
                 .hint = std::string("fix or unset ") + name() + " (default " + format_size(fallback_) + ")"});
  }
  return *n;
}

std::string SizeSetting::default_text() const { return format_size(fallback_); }
std::string SizeSetting::value_text() const { return format_size(read()); }

bool FlagSetting::read() const {
  const auto text = raw();
  if (!text) return fallback_;
  if (*text == "1") return true;
  if (*text == "0") return false;
  throw Error(ErrorCode::Config, std::string(name()) + "=\"" + *text + "\" is not a flag; accepted: 0 or 1",
              {.op = "read settings",
               .hint = std::string("fix or unset ") + name() + " (default " + (fallback_ ? "1" : "0") + ")"});
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
