// SPDX-License-Identifier: MIT
// Limits and helpers shared by every Store implementation, so that a key or
// value refused by one store is refused by all of them with the same message.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rdmx/bootstrap.hpp"
#include "rdmx/error.hpp"

namespace rdmx::bootstrap {

// Bounds on what a store accepts. They keep a malformed or hostile request
// from making the server allocate without limit.
inline constexpr std::size_t kMaxKeyBytes = 4096;
inline constexpr std::size_t kMaxValueBytes = std::size_t{64} << 20;
inline constexpr std::size_t kMaxWaitKeys = 65536;

// Throws InvalidArgument unless 1 <= key.size() <= kMaxKeyBytes.
void validate_key(const std::string& key, const char* op, const std::string& store_addr);
// Throws InvalidArgument when value.size() > kMaxValueBytes.
void validate_value(std::size_t value_size, const char* op, const std::string& key, const std::string& store_addr);

// A key as it may appear in a log line or error: quoted, non-printable bytes
// escaped, long keys shortened.
std::string printable_key(std::string_view key);
// "'a', 'b' and 3 more": the first few keys of a list, for error messages.
std::string printable_keys(const std::vector<std::string>& keys);

// Strict signed decimal parse of a whole string (the representation add() stores).
std::optional<std::int64_t> parse_int64(std::string_view text);

inline std::string to_string(const Bytes& bytes) { return std::string(bytes.begin(), bytes.end()); }
inline Bytes to_bytes(std::string_view text) { return Bytes(text.begin(), text.end()); }

// "250 ms", or "no timeout" for a negative value.
std::string describe_timeout(std::chrono::milliseconds timeout);

// The hint every blocking-wait timeout carries.
inline constexpr const char* kMissingKeyHint =
    "the rank that should set it may have failed, not started yet or be using another store/prefix; "
    "check every rank's log, or raise RDMX_TIMEOUT if the job is slow to start";

// "host:port", or "[v6addr]:port" when host is an IPv6 literal.
std::string format_host_port(const std::string& host, std::uint16_t port);
// Removes surrounding [] from an IPv6 literal.
std::string strip_brackets(const std::string& host);

}  // namespace rdmx::bootstrap
