// SPDX-License-Identifier: MIT
#include "bootstrap/tcp_store_request.hpp"

namespace rdmx::bootstrap {

using wire::Op;

namespace {

// The most bytes argument `index` of `op` may hold, and the least.
struct ArgBounds {
  std::size_t min;
  std::size_t max;
};

bool expected_arg_count(Op op, std::uint32_t nargs) {
  switch (op) {
    case Op::Hello: return nargs == 0;
    case Op::Set: return nargs == 2;
    case Op::Get: return nargs == 1;
    case Op::Wait: return nargs >= 1 && nargs <= kMaxWaitKeys;
    case Op::Add: return nargs == 2;
    case Op::Remove: return nargs == 1;
    case Op::CompareSet: return nargs == 3;
    case Op::Check: return nargs == 1;
    case Op::Stats: return nargs == 0;
    case Op::Keys: return nargs == 2;
  }
  return false;
}

ArgBounds arg_bounds(Op op, std::uint32_t index) {
  constexpr ArgBounds kKey{1, kMaxKeyBytes};
  constexpr ArgBounds kValue{0, kMaxValueBytes};
  if (op == Op::Keys) return {0, kMaxKeyBytes};  // a prefix and the last key seen, either empty
  if (op == Op::Wait || index == 0) return kKey;
  if (op == Op::Add) return {8, 8};
  return kValue;
}

bool known_op(std::uint8_t op) {
  return op >= static_cast<std::uint8_t>(Op::Hello) && op <= static_cast<std::uint8_t>(wire::kLastOp);
}

}  // namespace

// Parses one request from the front of `data`. Fields are checked as soon as
// they are available, so a bad length is refused before its bytes arrive.
ParseResult parse_request(std::string_view data, std::size_t& consumed, Request& out, std::string& why) {
  if (data.size() >= 4 && wire::get_u32(data.data()) != wire::kMagic) {
    why = "bad magic (not an rdmx store client?)";
    return ParseResult::Malformed;
  }
  if (data.size() < wire::kRequestHeaderBytes) return ParseResult::NeedMore;
  const char* p = data.data();
  auto version = static_cast<std::uint8_t>(p[4]);
  auto op = static_cast<std::uint8_t>(p[5]);
  if (version != wire::kVersion) {
    why = "unsupported protocol version " + std::to_string(version) + " (this server speaks " +
          std::to_string(wire::kVersion) + ")";
    return ParseResult::Malformed;
  }
  if (!known_op(op)) {
    why = "unknown op " + std::to_string(op);
    return ParseResult::Malformed;
  }
  if (wire::get_u16(p + 6) != 0) {
    why = "reserved header bits set";
    return ParseResult::Malformed;
  }
  auto timeout_ms = static_cast<std::int64_t>(wire::get_u64(p + 16));
  if (timeout_ms < -1) {
    why = "negative timeout " + std::to_string(timeout_ms);
    return ParseResult::Malformed;
  }
  std::uint32_t nargs = wire::get_u32(p + 24);
  auto typed_op = static_cast<Op>(op);
  if (!expected_arg_count(typed_op, nargs)) {
    why = std::string(wire::op_name(typed_op)) + " with " + std::to_string(nargs) + " arguments";
    return ParseResult::Malformed;
  }
  std::size_t offset = wire::kRequestHeaderBytes;
  std::size_t arg_bytes = 0;
  for (std::uint32_t i = 0; i < nargs; ++i) {
    if (data.size() < offset + 4) return ParseResult::NeedMore;
    std::uint32_t length = wire::get_u32(p + offset);
    ArgBounds bounds = arg_bounds(typed_op, i);
    if (length < bounds.min || length > bounds.max) {
      why = std::string(wire::op_name(typed_op)) + " argument " + std::to_string(i) + " has length " +
            std::to_string(length) + ", allowed " + std::to_string(bounds.min) + ".." + std::to_string(bounds.max);
      return ParseResult::Malformed;
    }
    arg_bytes += length;
    if (arg_bytes > wire::kMaxFrameArgBytes) {
      why = "request larger than " + std::to_string(wire::kMaxFrameArgBytes) + " bytes";
      return ParseResult::Malformed;
    }
    offset += 4 + length;
    if (data.size() < offset) return ParseResult::NeedMore;
  }
  out.op = typed_op;
  out.id = wire::get_u64(p + 8);
  out.timeout_ms = timeout_ms;
  out.args.clear();
  out.args.reserve(nargs);
  offset = wire::kRequestHeaderBytes;
  for (std::uint32_t i = 0; i < nargs; ++i) {
    std::uint32_t length = wire::get_u32(p + offset);
    out.args.emplace_back(p + offset + 4, length);
    offset += 4 + length;
  }
  consumed = offset;
  return ParseResult::Complete;
}

}  // namespace rdmx::bootstrap
