// SPDX-License-Identifier: MIT
// rdmx/error.hpp: the one error type every rdmx call throws.
//
// An rdmx::Error says what failed and where, so a log line alone is enough to
// act on: the operation, this rank, the peer (rank and address), the sizes
// involved and a hint. what() renders all of it on one line.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "rdmx/export.hpp"

RDMX_API_BEGIN

namespace rdmx {

enum class ErrorCode : std::uint8_t {
  InvalidArgument,  // caller passed something impossible (sizes, keys, caps)
  InvalidState,     // operation not allowed in the object's current state
  NotSupported,     // provider or build lacks the feature
  NotFound,         // a key, device, provider or store entry that does not exist
  Timeout,          // a blocking wait ran past its deadline (RDMX_TIMEOUT)
  PeerFailure,      // the remote side died, closed, or stopped answering
  Protocol,         // malformed or unexpected bytes from a peer
  QueueFull,        // a work queue or completion queue has no room
  System,           // an OS call failed (errno is in the message)
  Config,           // bad environment / launcher configuration
};

const char* to_string(ErrorCode code) noexcept;

// Where an error happened. Every field is optional; unset fields are left out
// of what().
struct ErrorContext {
  std::string op;         // e.g. "post_send RDMA_WRITE", "store.get"
  int rank = -1;          // this process's rank, if known (defaults to the bootstrap rank)
  int peer_rank = -1;     // the remote rank, if known
  std::string peer_addr;  // e.g. "10.0.0.2:41234"
  std::string sizes;      // e.g. "len=4096 region=[0x7f..,+1024)"
  std::string hint;       // what the user can do about it
  // The ranks known to have failed (dead, stopped or cut off), when the
  // error is about them; after Communicator::shrink() agreed on them, that
  // set. peer_rank is set too when there is one.
  std::vector<int> failed_ranks;
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message, ErrorContext context = {});

  ErrorCode code() const noexcept { return code_; }
  // The bare message, without the context that what() adds.
  const std::string& message() const noexcept { return message_; }
  const ErrorContext& context() const noexcept { return context_; }

 private:
  ErrorCode code_;
  std::string message_;
  ErrorContext context_;
};

}  // namespace rdmx
RDMX_API_END
