// SPDX-License-Identifier: MIT
#include "services/config.hpp"

#include <atomic>
#include <cmath>
#include <cstdlib>

#include "services/settings.hpp"

namespace rdmx::core {
namespace {

std::atomic<int> g_rank{-1};

constexpr DurationSetting kTimeout{
    "RDMX_TIMEOUT", std::chrono::seconds(60), std::chrono::milliseconds(1),
    "bound on every blocking wait (store, CQ wait, connection): 30 (seconds), 2.5s or 500ms, at most 30 days"};
RDMX_SETTING(kTimeout);
constexpr DurationSetting kRnrTimeout{
    "RDMX_RNR_TIMEOUT", std::chrono::seconds(1), std::chrono::milliseconds(0),
    "how long a SEND waits for the peer to post a receive before it fails with RNR_RETRY_EXC_ERR"};
RDMX_SETTING(kRnrTimeout);
// The default is long enough that a progress engine receiving a stream does
// not fall asleep between messages (docs/journal/PERFORMANCE-HISTORY.md, "Waiting").
constexpr IntegerSetting kSpinUs{
    "RDMX_SPIN_US",
    200,
    0,
    kMaxSpin.count(),
    "microseconds",
    "how long a waiter busy-polls before it sleeps, in microseconds (at most 1000000); lower it when ranks far "
    "outnumber cores; unset, collectives spin 20 ms where the machine has two cores per rank"};
RDMX_SETTING(kSpinUs);
constexpr FlagSetting kRegistrationCache{
    "RDMX_REGISTRATION_CACHE", true,
    "1: collectives keep registrations of user buffers between operations (where registration pins memory, only "
    "while unmaps can be watched: rdmx info says whether); 0: register them for each operation"};
RDMX_SETTING(kRegistrationCache);

}  // namespace

std::optional<std::string> env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::chrono::milliseconds read_timeout() { return kTimeout.read(); }
std::chrono::milliseconds read_rnr_timeout() { return kRnrTimeout.read(); }
std::chrono::microseconds read_spin_budget() { return std::chrono::microseconds(kSpinUs.read()); }

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

std::chrono::microseconds spin_budget() {
  static const auto value = read_spin_budget();
  return value;
}

bool registration_cache_enabled() {
  static const bool value = kRegistrationCache.read();
  return value;
}

int current_rank() noexcept { return g_rank.load(std::memory_order_relaxed); }
void set_current_rank(int rank) noexcept { g_rank.store(rank, std::memory_order_relaxed); }

}  // namespace rdmx::core
