// SPDX-License-Identifier: MIT
// Process-wide settings read from RDMX_* environment variables, once.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace rdmx::core {

// The duration settings, read once. A malformed or out-of-range value is an
// Error(Config) naming the variable, its value and the accepted range, thrown
// by every call: a wait bounded by a misread number fails in ways that point
// nowhere near the variable (1e10 s overflows a deadline into the past).
//
// RDMX_TIMEOUT: bound on every blocking wait. Accepts "30" (seconds), "2.5s",
// "500ms", from 1 ms to kMaxDuration. Default 60 s.
std::chrono::milliseconds timeout();
// RDMX_RNR_TIMEOUT: how long a SEND retries while the peer has no receive
// posted. Same syntax, from 0 to kMaxDuration. Default 1 s.
std::chrono::milliseconds rnr_timeout();
// RDMX_SPIN_US: how long a waiter busy-polls before it blocks, in whole
// microseconds from 0 to 1000000. Default 200 us.
std::chrono::microseconds spin_budget();
// The same, read from the environment now and not cached (rdmx info, tests).
std::chrono::milliseconds read_timeout();
std::chrono::milliseconds read_rnr_timeout();
std::chrono::microseconds read_spin_budget();

// The longest duration a setting accepts: 30 days, far beyond any sane wait
// and far below what a deadline (steady_clock nanoseconds) can hold.
inline constexpr std::chrono::milliseconds kMaxDuration{30LL * 24 * 3600 * 1000};
inline constexpr std::chrono::microseconds kMaxSpin{1000000};

// RDMX_REGISTRATION_CACHE: 1 (default) keeps page-pinning registrations of
// user buffers between operations while unmaps can be seen; 0 registers
// them for each operation (to rule the cache out when chasing a problem).
bool registration_cache_enabled();

// Parses a duration as above; nullopt when malformed or outside 0..kMaxDuration.
std::optional<std::chrono::milliseconds> parse_duration(const std::string& text);
// Parses a byte count: "4096", "16K", "4M", "1G" (binary multiples); nullopt when malformed.
std::optional<std::size_t> parse_size(const std::string& text);
// A byte count from the environment: `fallback` when unset, and (with a warning) when malformed.
std::size_t env_size(const char* name, std::size_t fallback);

// Raw environment lookup; nullopt when unset or empty.
std::optional<std::string> env(const char* name);

// The rank used to label logs and errors (set by bootstrap; -1 until then).
int current_rank() noexcept;
void set_current_rank(int rank) noexcept;

}  // namespace rdmx::core
