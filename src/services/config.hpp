// SPDX-License-Identifier: MIT
// Process-wide settings read from RDMX_* environment variables, once.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace rdmx::core {

// The core settings (services/config.cpp declares them), read once. A refused
// value (services/settings.hpp) throws on every call.
//
// RDMX_TIMEOUT: bound on every blocking wait.
std::chrono::milliseconds timeout();
// RDMX_RNR_TIMEOUT: how long a SEND retries while the peer has no receive posted.
std::chrono::milliseconds rnr_timeout();
// RDMX_SPIN_US: how long a waiter busy-polls before it blocks.
std::chrono::microseconds spin_budget();
// The same, read from the environment now and not cached (rdmx info, tests).
std::chrono::milliseconds read_timeout();
std::chrono::milliseconds read_rnr_timeout();
std::chrono::microseconds read_spin_budget();

// The longest duration a setting accepts: 30 days, far beyond any sane wait
// and far below what a deadline (steady_clock nanoseconds) can hold.
inline constexpr std::chrono::milliseconds kMaxDuration{30LL * 24 * 3600 * 1000};
inline constexpr std::chrono::microseconds kMaxSpin{1000000};

// RDMX_REGISTRATION_CACHE: whether collectives keep registrations of user buffers.
bool registration_cache_enabled();

// Parses a duration ("30", "2.5s", "500ms"); nullopt when malformed or outside 0..kMaxDuration.
std::optional<std::chrono::milliseconds> parse_duration(const std::string& text);
// Parses a byte count: "4096", "16K", "4M", "1G" (binary multiples); nullopt when malformed.
std::optional<std::size_t> parse_size(const std::string& text);

// Raw environment lookup; nullopt when unset or empty.
std::optional<std::string> env(const char* name);

// The rank used to label logs and errors (set by bootstrap; -1 until then).
int current_rank() noexcept;
void set_current_rank(int rank) noexcept;

}  // namespace rdmx::core
