// SPDX-License-Identifier: MIT
// The duration settings (src/services/config.cpp): what they accept, and that a
// value they cannot honour is refused with the variable, the value and the
// range instead of overflowing a deadline (RDMX_TIMEOUT=1e10 used to make
// every wait time out at once, 1e17 to print "-9223372036854775808 ms").
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "rdmx/error.hpp"
#include "services/config.hpp"
#include "support/scoped_env.hpp"
#include "support/text.hpp"

namespace rdmx {
namespace {

using test::contains;

using namespace std::chrono_literals;

using test::ScopedEnv;

// The Config error `read` throws for `value` of `name`, or "" when it throws none.
template <typename Read>
std::string config_refusal(const char* name, const char* value, Read read) {
  ScopedEnv env(name, value);
  try {
    read();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Config) << e.what();
    return e.what();
  }
  return "";
}

TEST(ConfigDuration, AcceptsSecondsAndMilliseconds) {
  {
    ScopedEnv env("RDMX_TIMEOUT", "30");
    EXPECT_EQ(core::read_timeout(), 30s);
  }
  {
    ScopedEnv env("RDMX_TIMEOUT", "2.5s");
    EXPECT_EQ(core::read_timeout(), 2500ms);
  }
  {
    ScopedEnv env("RDMX_TIMEOUT", "500ms");
    EXPECT_EQ(core::read_timeout(), 500ms);
  }
  {
    ScopedEnv env("RDMX_TIMEOUT", "30d");  // not a unit rdmx knows: refused below, not read as 30 s
    EXPECT_THROW(core::read_timeout(), Error);
  }
  {
    ScopedEnv env("RDMX_TIMEOUT", nullptr);
    EXPECT_EQ(core::read_timeout(), 60s);
  }
  {
    ScopedEnv env("RDMX_TIMEOUT", "2592000");  // 30 days, the largest accepted
    EXPECT_EQ(core::read_timeout(), core::kMaxDuration);
  }
}

TEST(ConfigDuration, HugeValuesAreRefusedNotOverflowed) {
  for (const char* value : {"1e10", "1e17", "1e300", "2592001"}) {
    const std::string what = config_refusal("RDMX_TIMEOUT", value, core::read_timeout);
    EXPECT_TRUE(contains(what, "RDMX_TIMEOUT=\"" + std::string(value) + "\" is out of range")) << what;
    EXPECT_TRUE(contains(what, "30 days")) << what;
    EXPECT_TRUE(contains(what, "1ms")) << what;  // the lower end of the range
    EXPECT_FALSE(contains(what, "-9223372036854775808")) << what;
    EXPECT_TRUE(contains(what, "hint: fix or unset RDMX_TIMEOUT (default 60s)")) << what;
  }
  EXPECT_EQ(core::parse_duration("1e17"), std::nullopt);
}

TEST(ConfigDuration, NegativeAndZeroTimeoutsAreRefused) {
  for (const char* value : {"-5", "-1ms", "0", "0.0004"}) {
    const std::string what = config_refusal("RDMX_TIMEOUT", value, core::read_timeout);
    EXPECT_TRUE(contains(what, "is out of range")) << value << ": " << what;
  }
  // RNR may be 0 (fail at once when no receive is posted), never negative.
  {
    ScopedEnv env("RDMX_RNR_TIMEOUT", "0");
    EXPECT_EQ(core::read_rnr_timeout(), 0ms);
  }
  EXPECT_TRUE(contains(config_refusal("RDMX_RNR_TIMEOUT", "-1", core::read_rnr_timeout),
                       "RDMX_RNR_TIMEOUT=\"-1\" is out of range"));
  EXPECT_TRUE(contains(config_refusal("RDMX_RNR_TIMEOUT", "1e17", core::read_rnr_timeout), "30 days"));
}

TEST(ConfigDuration, GarbageIsNamedWithWhatIsAccepted) {
  for (const char* value : {"soon", "30 s", "5min", "ms", "nan", "inf", "1e10e"}) {
    const std::string what = config_refusal("RDMX_TIMEOUT", value, core::read_timeout);
    EXPECT_TRUE(contains(what, "RDMX_TIMEOUT=\"" + std::string(value) + "\" is not a duration")) << what;
    EXPECT_TRUE(contains(what, "\"2.5s\"")) << what;
    EXPECT_TRUE(contains(what, "\"500ms\"")) << what;
  }
}

TEST(ConfigDuration, SpinBudgetIsWholeMicrosecondsUpToOneSecond) {
  {
    ScopedEnv env("RDMX_SPIN_US", "0");
    EXPECT_EQ(core::read_spin_budget(), 0us);
  }
  {
    ScopedEnv env("RDMX_SPIN_US", "1000000");
    EXPECT_EQ(core::read_spin_budget(), 1s);
  }
  for (const char* value : {"1e10", "99999999999999999999999", "-1", "1000001"}) {
    const std::string what = config_refusal("RDMX_SPIN_US", value, core::read_spin_budget);
    EXPECT_TRUE(contains(what, "RDMX_SPIN_US=\"" + std::string(value) + "\" is")) << what;
    EXPECT_TRUE(contains(what, "from 0 to 1000000")) << what;
  }
  EXPECT_TRUE(contains(config_refusal("RDMX_SPIN_US", "fast", core::read_spin_budget), "not a number of microseconds"));
}

}  // namespace
}  // namespace rdmx
