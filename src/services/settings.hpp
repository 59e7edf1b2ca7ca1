// SPDX-License-Identifier: MIT
// Every RDMX_* setting is declared once, beside the code that reads it, as a
// constant of one of the kinds below (name, typed default, one line of
// documentation), and registered there with RDMX_SETTING, as NCCL_PARAM
// declares each NCCL_* variable where it is read. `rdmx info` lists the
// registry with the values in force, and a test checks the README's table
// against it, so neither can miss a setting or restate a default.
//
// A value that is malformed or out of range is refused, whatever its kind:
// reading it throws Error(Config) naming the variable, its value and what is
// accepted, on every read (a wait bounded by a misread number fails far from
// the variable; a size or flag used as its default would run a job other
// than the one asked for). Numbers are decimal only: "0x10", "010", "+5",
// "nan" and "inf" are refused rather than read as something the user did
// not write. Free text and choices are the reading code's to judge.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace rdmx::core {

class Setting {
 public:
  constexpr Setting(const char* name, const char* doc) : name_(name), doc_(doc) {}
  constexpr const char* name() const { return name_; }
  constexpr const char* doc() const { return doc_; }
  // The default as it would be written in the environment ("60s", "4M", "auto").
  virtual std::string default_text() const = 0;
  // The value in force, written the same way; throws Error(Config) when the
  // library refuses the variable's value.
  virtual std::string value_text() const = 0;
  // Set, but malformed: the library uses the default instead.
  virtual bool ignored() const { return false; }
  // The variable's text, or nullopt when unset or empty.
  std::optional<std::string> raw() const;

 protected:
  ~Setting() = default;

 private:
  const char* name_;
  const char* doc_;
};

// "30" (seconds), "2.5s" or "500ms", from `min` to kMaxDuration; refused otherwise.
class DurationSetting final : public Setting {
 public:
  constexpr DurationSetting(const char* name, std::chrono::milliseconds fallback, std::chrono::milliseconds min,
                            const char* doc)
      : Setting(name, doc), fallback_(fallback), min_(min) {}
  std::chrono::milliseconds read() const;
  std::string default_text() const override;
  std::string value_text() const override;

 private:
  std::chrono::milliseconds fallback_;
  std::chrono::milliseconds min_;
};

// A whole number of `unit` ("microseconds") from `min` to `max`; refused otherwise.
class IntegerSetting final : public Setting {
 public:
  constexpr IntegerSetting(const char* name, long long fallback, long long min, long long max, const char* unit,
                           const char* doc)
      : Setting(name, doc), fallback_(fallback), min_(min), max_(max), unit_(unit) {}
  long long read() const;
  std::string default_text() const override { return std::to_string(fallback_); }
  std::string value_text() const override { return std::to_string(read()); }

 private:
  long long fallback_;
  long long min_;
  long long max_;
  const char* unit_;
};

// The largest size a SizeSetting accepts unless it says less.
inline constexpr std::size_t kMaxSizeSetting = std::size_t{1} << 40;

// A byte count ("4096", "16K", "4M", "1G") from `min` to `max`; refused otherwise.
class SizeSetting final : public Setting {
 public:
  constexpr SizeSetting(const char* name, std::size_t fallback, const char* doc, std::size_t min = 0,
                        std::size_t max = kMaxSizeSetting)
      : Setting(name, doc), fallback_(fallback), min_(min), max_(max) {}
  std::size_t read() const;
  std::string default_text() const override;
  std::string value_text() const override;

 private:
  std::size_t fallback_;
  std::size_t min_;
  std::size_t max_;
};

// 0 or 1; refused otherwise.
class FlagSetting final : public Setting {
 public:
  constexpr FlagSetting(const char* name, bool fallback, const char* doc) : Setting(name, doc), fallback_(fallback) {}
  bool read() const;
  std::string default_text() const override { return fallback_ ? "1" : "0"; }
  std::string value_text() const override { return read() ? "1" : "0"; }

 private:
  bool fallback_;
};

// Free text the reading code interprets. `fallback` says what unset means
// ("auto", "unset"); `computed`, when given, is the value in force when unset.
class TextSetting final : public Setting {
 public:
  constexpr TextSetting(const char* name, const char* fallback, const char* doc, std::string (*computed)() = nullptr)
      : Setting(name, doc), fallback_(fallback), computed_(computed) {}
  // The variable's text, or nullopt when unset.
  std::optional<std::string> read() const { return raw(); }
  std::string default_text() const override { return fallback_; }
  std::string value_text() const override { return raw().value_or(computed_ != nullptr ? computed_() : fallback_); }

 private:
  const char* fallback_;
  std::string (*computed_)();
};

// One of a few words, whose value in force the reading code decides
// (`in_force`: the log level, the reduction ISA the CPU allows).
class ChoiceSetting final : public Setting {
 public:
  constexpr ChoiceSetting(const char* name, const char* fallback, const char* const* choices, const char* doc,
                          std::string (*in_force)())
      : Setting(name, doc), fallback_(fallback), choices_(choices), in_force_(in_force) {}
  std::string default_text() const override { return fallback_; }
  std::string value_text() const override { return in_force_(); }
  // Not one of the choices (compared without case).
  bool ignored() const override;

 private:
  const char* fallback_;
  const char* const* choices_;  // ends with nullptr
  std::string (*in_force_)();
};

// Registers a setting with the registry (at load time).
class SettingRegistration {
 public:
  explicit SettingRegistration(const Setting& setting);
};
#define RDMX_SETTING(variable) \
  static const ::rdmx::core::SettingRegistration rdmx_setting_registration_##variable { variable }

// Every registered setting, by name.
std::vector<const Setting*> registered_settings();

// Byte counts and durations as users write them ("4M", "60s", "500ms").
std::string format_size(std::size_t bytes);
std::string format_duration(std::chrono::milliseconds ms);

}  // namespace rdmx::core
