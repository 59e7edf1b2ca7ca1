// SPDX-License-Identifier: MIT
#include "rdmx/error.hpp"

#include "services/config.hpp"

namespace rdmx {
namespace {

// "rdmx: <message> [<kind>, op=..., rank=...] hint: ...". The message leads,
// so a line reads as a sentence ("rdmx: no RDMA device: ..."); the kind stays
// in the brackets for whoever greps logs for "timeout" or "peer failure".
std::string render(ErrorCode code, const std::string& message, const ErrorContext& c) {
  std::string out = "rdmx: ";
  out += message;
  std::string where = to_string(code);
  auto add = [&where](const std::string& item) {
    if (!where.empty()) where += ", ";
    where += item;
  };
  if (!c.op.empty()) add("op=" + c.op);
  if (c.rank >= 0) add("rank=" + std::to_string(c.rank));
  if (c.peer_rank >= 0) add("peer=" + std::to_string(c.peer_rank));
  if (!c.peer_addr.empty()) add("peer_addr=" + c.peer_addr);
  if (!c.failed_ranks.empty()) {
    std::string ranks;
    for (int r : c.failed_ranks) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    add("failed=" + ranks);
  }
  if (!c.sizes.empty()) add(c.sizes);
  out += " [" + where + "]";
  if (!c.hint.empty()) out += " hint: " + c.hint;
  return out;
}

ErrorContext with_rank(ErrorContext context) {
  if (context.rank < 0) context.rank = core::current_rank();
  return context;
}
}  // namespace

const char* to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::InvalidArgument: return "invalid argument";
    case ErrorCode::InvalidState: return "invalid state";
    case ErrorCode::NotSupported: return "not supported";
    case ErrorCode::NotFound: return "not found";
    case ErrorCode::Timeout: return "timeout";
    case ErrorCode::PeerFailure: return "peer failure";
    case ErrorCode::Protocol: return "protocol error";
    case ErrorCode::QueueFull: return "queue full";
    case ErrorCode::System: return "system error";
    case ErrorCode::Config: return "configuration error";
  }
  return "error";
}

Error::Error(ErrorCode code, const std::string& message, ErrorContext context)
    : std::runtime_error(render(code, message, with_rank(context))),
      code_(code),
      message_(message),
      context_(with_rank(std::move(context))) {}

}  // namespace rdmx
