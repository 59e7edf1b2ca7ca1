// SPDX-License-Identifier: MIT
// Who may connect: a job secret and the challenge-response that proves it.
//
// The listening side of every network connection rdmx accepts (the tcp
// provider's QP listener, the TCP store) sends a fresh random challenge the
// moment it accepts. The connecting side answers with
// HMAC-SHA256(secret, purpose | challenge | what it binds), and the listener
// acts on no other byte until the proof verifies. A challenge is never reused,
// so a recorded answer is worth nothing; the purpose string keeps a proof made
// for one protocol from being replayed into another.
//
// The secret is RDMX_AUTH_KEY, or the contents of RDMX_AUTH_KEY_FILE; `rdmx
// run` makes one per job. With neither set rdmx accepts every connection as
// before, and says so once per process (and in `rdmx info`).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace rdmx::core::auth {

inline constexpr std::size_t kChallengeBytes = 32;
inline constexpr std::size_t kProofBytes = 32;
using Challenge = std::array<std::uint8_t, kChallengeBytes>;
using Proof = std::array<std::uint8_t, kProofBytes>;

// Whether this process has a job secret, and where it came from ("RDMX_AUTH_KEY",
// "RDMX_AUTH_KEY_FILE=/path", or why there is none). Reading a key that cannot
// be used (an unreadable file, fewer than 16 bytes, both variables set)
// throws Error(Config) naming the variable.
bool key_configured();
std::string key_source();

// A fresh challenge from the kernel's random source.
Challenge new_challenge();

// The connector's answer. Without a key the proof is all zeros: a listener
// that has no key accepts it, one that has a key refuses it.
Proof prove(std::string_view purpose, const Challenge& challenge, std::span<const std::uint8_t> bound = {});

// True when `proof` answers `challenge` under this process's key (compared in
// constant time), or when this process has no key.
bool verify(std::string_view purpose, const Challenge& challenge, std::span<const std::uint8_t> bound,
            const Proof& proof);

// Says once per process, at WARN, that `what` accepts or makes connections
// nobody authenticates. Does nothing when a key is configured.
void warn_if_unauthenticated(const char* what);

// Logs a refused connection at WARN with where it came from. Rate-limited: a
// storm of refusals logs the first few of each second and then how many
// were not logged.
void log_refusal(const std::string& listener, const std::string& source, const std::string& why);

// A new random job secret, as text for RDMX_AUTH_KEY (64 hex digits).
std::string new_job_secret();

}  // namespace rdmx::core::auth
