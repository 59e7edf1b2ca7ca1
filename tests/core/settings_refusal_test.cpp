// SPDX-License-Identifier: MIT
// Every numeric setting (durations, bounded integers, sizes, flags) refuses a
// value it cannot read as the user wrote it, the same way: Error(Config)
// naming the variable, the value and what is accepted. Neither hex, octal,
// non-finite numbers nor a malformed size fall back to something else.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "coll/settings.hpp"
#include "rdmx/error.hpp"
#include "services/config.hpp"
#include "services/settings.hpp"
#include "support/scoped_env.hpp"
#include "support/text.hpp"

namespace rdmx {
namespace {

using test::contains;

using namespace std::chrono_literals;

using test::ScopedEnv;

const core::Setting* registered(const std::string& name) {
  for (const core::Setting* s : core::registered_settings()) {
    if (name == s->name()) return s;
  }
  return nullptr;
}

bool numeric(const core::Setting& s) {
  return dynamic_cast<const core::DurationSetting*>(&s) != nullptr ||
         dynamic_cast<const core::IntegerSetting*>(&s) != nullptr ||
         dynamic_cast<const core::SizeSetting*>(&s) != nullptr || dynamic_cast<const core::FlagSetting*>(&s) != nullptr;
}

// The library's message refusing `value` of `name`, or nullopt with the value it took instead.
std::optional<std::string> refusal(const std::string& name, const char* value, std::string* taken = nullptr) {
  const core::Setting* s = registered(name);
  if (s == nullptr) {
    ADD_FAILURE() << name << " is not a registered setting";
    return std::nullopt;
  }
  ScopedEnv env(name.c_str(), value);
  try {
    const std::string text = s->value_text();
    if (taken != nullptr) *taken = text;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Config) << e.what();
    return std::string(e.what());
  }
  return std::nullopt;
}

// A duration is decimal: "0x10" is not 16 seconds, "010" not 10 (or 8).
TEST(SettingsRefusal, HexAndOctalLookingDurationsAreRefused) {
  for (const char* value : {"0x10", "0X10", "0x1p4", "010", "00", "+5", " 5", "5 ", ".5", "5.", "1e", "--5"}) {
    std::string taken;
    const auto what = refusal("RDMX_TIMEOUT", value, &taken);
    ASSERT_TRUE(what.has_value()) << "RDMX_TIMEOUT=\"" << value << "\" was read as " << taken;
    EXPECT_TRUE(contains(*what, "RDMX_TIMEOUT=\"" + std::string(value) + "\" is not a duration")) << *what;
    EXPECT_TRUE(contains(*what, "\"2.5s\"")) << *what;
  }
  // What the documentation shows stays accepted.
  for (const auto& [value, ms] :
       {std::pair{"30", 30000}, {"2.5s", 2500}, {"500ms", 500}, {"0.5", 500}, {"1e3ms", 1000}, {"10", 10000}}) {
    ScopedEnv env("RDMX_TIMEOUT", value);
    EXPECT_EQ(core::read_timeout().count(), ms) << value;
  }
  ScopedEnv env("RDMX_RNR_TIMEOUT", "0");
  EXPECT_EQ(core::read_rnr_timeout(), 0ms);
}

// RDMX_COLL_BUFFSIZE=1T used to warn and run with 4M: a size is refused like every other setting.
TEST(SettingsRefusal, AMalformedOrHugeSizeIsRefusedNotReplacedByTheDefault) {
  for (const char* value :
       {"1T", "4MB", "lots", "0x100000", "010", "-1", "+4M", "nan", "4 M", "99999999999999999999"}) {
    std::string taken;
    const auto what = refusal("RDMX_COLL_BUFFSIZE", value, &taken);
    ASSERT_TRUE(what.has_value()) << "RDMX_COLL_BUFFSIZE=\"" << value << "\" was read as " << taken;
    EXPECT_TRUE(contains(*what, "RDMX_COLL_BUFFSIZE=\"" + std::string(value) + "\" is not a size")) << *what;
    EXPECT_TRUE(contains(*what, "from 1K to 1G")) << *what;
    EXPECT_TRUE(contains(*what, "hint: fix or unset RDMX_COLL_BUFFSIZE (default 4M)")) << *what;
  }
  for (const char* value : {"2G", "512", "17179869184G"}) {
    const auto what = refusal("RDMX_COLL_BUFFSIZE", value);
    ASSERT_TRUE(what.has_value()) << value;
    EXPECT_TRUE(contains(*what, "RDMX_COLL_BUFFSIZE=\"" + std::string(value) + "\" is ")) << *what;
    EXPECT_TRUE(contains(*what, "from 1K to 1G")) << *what;
  }
  // The collectives read it when a communicator is made: refused there, not only in rdmx info.
  {
    ScopedEnv env("RDMX_COLL_BUFFSIZE", "1T");
    EXPECT_THROW(coll::coll_settings(), Error);
  }
  ScopedEnv env("RDMX_COLL_BUFFSIZE", "64K");
  EXPECT_EQ(coll::coll_settings().buffsize, std::size_t{64} << 10);
}

// RDMX_COLL_SLOTS=0 used to be reported as "x 1 slots": slots are a count from 2 on, refused otherwise.
TEST(SettingsRefusal, SlotsOutsideTwoTo65536AreRefusedWithTheValueGiven) {
  for (const char* value : {"0", "1", "65537", "16K"}) {
    const auto what = refusal("RDMX_COLL_SLOTS", value);
    ASSERT_TRUE(what.has_value()) << "RDMX_COLL_SLOTS=\"" << value << "\" was accepted";
    EXPECT_TRUE(contains(*what, "RDMX_COLL_SLOTS=\"" + std::string(value) + "\" is ")) << *what;
    EXPECT_TRUE(contains(*what, "from 2 to 65536")) << *what;
  }
  ScopedEnv env("RDMX_COLL_SLOTS", "2");
  EXPECT_EQ(coll::coll_settings().slots, 2u);
}

// A flag is 0 or 1; "yes" used to warn and run with the default.
TEST(SettingsRefusal, AFlagOtherThanZeroOrOneIsRefused) {
  for (const char* value : {"yes", "true", "2", "01", "0x1"}) {
    const auto what = refusal("RDMX_REGISTRATION_CACHE", value);
    ASSERT_TRUE(what.has_value()) << "RDMX_REGISTRATION_CACHE=\"" << value << "\" was accepted";
    EXPECT_TRUE(contains(*what, "RDMX_REGISTRATION_CACHE=\"" + std::string(value) + "\" is not a flag")) << *what;
    EXPECT_TRUE(contains(*what, "accepted: 0 or 1")) << *what;
  }
}

// Whatever its kind, every numeric setting the library registers refuses
// the same mistakes, so a setting added later cannot fall back silently.
TEST(SettingsRefusal, EveryNumericSettingRefusesHexOctalNonFiniteAndGarbage) {
  int checked = 0;
  for (const core::Setting* s : core::registered_settings()) {
    if (!numeric(*s)) continue;
    ++checked;
    for (const char* value : {"0x10", "010", "nan", "inf", "-nan", " 1", "+1", "1x", "garbage"}) {
      std::string taken;
      const auto what = refusal(s->name(), value, &taken);
      ASSERT_TRUE(what.has_value()) << s->name() << "=\"" << value << "\" was read as " << taken;
      EXPECT_TRUE(contains(*what, std::string(s->name()) + "=\"" + value + "\" is ")) << *what;
      EXPECT_TRUE(contains(*what, "accepted: ")) << *what;
      EXPECT_TRUE(contains(*what, "fix or unset " + std::string(s->name()))) << *what;
    }
  }
  EXPECT_GE(checked, 15) << "fewer numeric settings registered than the library declares";
}

}  // namespace
}  // namespace rdmx
