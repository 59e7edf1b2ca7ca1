// SPDX-License-Identifier: MIT
// The TCP store's wire format (see docs/BOOTSTRAP.md).
//
// Every integer is little-endian. A request is
//
//   u32 magic "RDXS" | u8 version | u8 op | u16 reserved (0) | u64 request_id |
//   i64 timeout_ms (-1: none) | u32 nargs | nargs x (u32 length | bytes)
//
// and a response is
//
//   u32 magic "RDXS" | u8 version | u8 status | u16 reserved (0) | u64 request_id |
//   u32 nargs | nargs x (u32 length | bytes)
//
// Before any request the connection is authenticated both ways
// (services/auth.hpp). The server speaks first, with a challenge; the client
// answers with its proof and a challenge of its own; the server gives its
// verdict and, when it accepts, its own proof over the client's challenge:
//
//   challenge: u32 magic "RDXA" | u8 version | u8 key required (0/1) | u16 0 | 32-byte challenge
//   proof:     u32 magic "RDXA" | u8 version | u8 0 | u16 0 | 32-byte HMAC (kAuthPurpose, the server's
//              challenge) | 32-byte challenge
//   verdict:   u32 magic "RDXA" | u8 version | u8 accepted (1) or refused (0) | u16 0 | 32-byte HMAC
//              (kServerAuthPurpose, the client's challenge, bound to the server's; zeros when refused)
//
// A client with a secret refuses a server that requires no proof, or whose
// proof does not verify, and sends no request before the server's proof has
// verified. A server without a secret proves with 32 zero bytes, which only
// a client without a secret accepts.
//
// Responses carry the request's id. A client that gave up waiting (timeout)
// later receives the answer to its abandoned request, and skips it by id.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "bootstrap/store_common.hpp"

namespace rdmx::bootstrap::wire {

inline constexpr std::uint32_t kMagic = 0x53584452;      // "RDXS" as bytes on the wire
inline constexpr std::uint8_t kVersion = 3;              // 3: both ends of a connection authenticate
inline constexpr std::uint32_t kAuthMagic = 0x41584452;  // "RDXA" as bytes on the wire
inline constexpr std::size_t kChallengeFrameBytes = 40;
inline constexpr std::size_t kProofFrameBytes = 72;
inline constexpr std::size_t kVerdictFrameBytes = 40;
// Distinct, so neither side's proof can be reflected back as the other's.
inline constexpr const char* kAuthPurpose = "rdmx tcp store v3";
inline constexpr const char* kServerAuthPurpose = "rdmx tcp store server v3";
inline constexpr std::size_t kRequestHeaderBytes = 28;
inline constexpr std::size_t kResponseHeaderBytes = 20;
// The most argument bytes one frame may carry: compare_set's two values and its key.
inline constexpr std::size_t kMaxFrameArgBytes = 2 * kMaxValueBytes + kMaxKeyBytes;

enum class Op : std::uint8_t {
  Hello = 1,       // []                      -> Ok [server banner]
  Set = 2,         // [key, value]            -> Ok []
  Get = 3,         // [key]                   -> Ok [value] | Timeout [key]        (parks)
  Wait = 4,        // [key...]                -> Ok [] | Timeout [missing key...]  (parks)
  Add = 5,         // [key, i64 delta]        -> Ok [i64 new] | Invalid [message]
  Remove = 6,      // [key]                   -> Ok [u8 removed]
  CompareSet = 7,  // [key, expected, desired] -> Ok [value now stored]
  Check = 8,       // [key]                   -> Ok [u8 exists]
  Stats = 9,       // []                      -> Ok [u64 keys, u64 bytes, u64 parked, u64 clients]
  Keys = 10,       // [prefix, after]         -> Ok [u8 complete, key...]  (sorted, each > after)
};

inline constexpr Op kLastOp = Op::Keys;
// The most keys one Keys answer carries; the client asks again after the last.
inline constexpr std::size_t kKeysPerAnswer = 4096;

enum class Status : std::uint8_t { Ok = 0, Timeout = 1, Invalid = 2 };

inline const char* op_name(Op op) {
  switch (op) {
    case Op::Hello: return "store.hello";
    case Op::Set: return "store.set";
    case Op::Get: return "store.get";
    case Op::Wait: return "store.wait";
    case Op::Add: return "store.add";
    case Op::Remove: return "store.remove";
    case Op::CompareSet: return "store.compare_set";
    case Op::Check: return "store.check";
    case Op::Stats: return "store.stats";
    case Op::Keys: return "store.keys";
  }
  return "store.?";
}

inline void put_u16(std::string& out, std::uint16_t v) {
  for (int i = 0; i < 2; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}
inline void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}
inline void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}
inline std::uint16_t get_u16(const char* p) {
  return static_cast<std::uint16_t>(static_cast<unsigned char>(p[0]) | static_cast<unsigned char>(p[1]) << 8);
}
inline std::uint32_t get_u32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
inline std::uint64_t get_u64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// The fixed part of the three authentication frames: magic, version, flag, reserved.
inline std::string auth_frame_head(std::uint8_t flag) {
  std::string out;
  put_u32(out, kAuthMagic);
  out += static_cast<char>(kVersion);
  out += static_cast<char>(flag);
  put_u16(out, 0);
  return out;
}
// True when `p` starts an authentication frame of this version (its flag at p[5]).
inline bool is_auth_frame_head(const char* p) {
  return get_u32(p) == kAuthMagic && static_cast<std::uint8_t>(p[4]) == kVersion && get_u16(p + 6) == 0 &&
         static_cast<std::uint8_t>(p[5]) <= 1;
}

inline std::string encode_i64(std::int64_t value) {
  std::string out;
  put_u64(out, static_cast<std::uint64_t>(value));
  return out;
}

inline void put_args(std::string& out, const std::vector<std::string_view>& args) {
  put_u32(out, static_cast<std::uint32_t>(args.size()));
  for (auto arg : args) {
    put_u32(out, static_cast<std::uint32_t>(arg.size()));
    out.append(arg.data(), arg.size());
  }
}

inline std::string encode_request(Op op, std::uint64_t request_id, std::int64_t timeout_ms,
                                  const std::vector<std::string_view>& args) {
  std::string out;
  std::size_t total = kRequestHeaderBytes;
  for (auto arg : args) total += 4 + arg.size();
  out.reserve(total);
  put_u32(out, kMagic);
  out += static_cast<char>(kVersion);
  out += static_cast<char>(op);
  put_u16(out, 0);
  put_u64(out, request_id);
  put_u64(out, static_cast<std::uint64_t>(timeout_ms));
  put_args(out, args);
  return out;
}

inline void append_response(std::string& out, Status status, std::uint64_t request_id,
                            const std::vector<std::string_view>& args) {
  put_u32(out, kMagic);
  out += static_cast<char>(kVersion);
  out += static_cast<char>(status);
  put_u16(out, 0);
  put_u64(out, request_id);
  put_args(out, args);
}

}  // namespace rdmx::bootstrap::wire
