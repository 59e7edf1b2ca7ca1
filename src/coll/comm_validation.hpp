// SPDX-License-Identifier: MIT
// The checks a communicator's call passes before it runs, on the calling
// thread, so that a call no rank could run fails there with what was wrong;
// and what a valid call touches on this rank.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "coll/communicator_internal.hpp"
#include "rdmx/comm.hpp"
#include "rdmx/verbs.hpp"

namespace rdmx::coll {

class CallValidator {
 public:
  using Call = coll::Call;

  CallValidator(int rank, int size) : rank_(rank), size_(size) {}

  // Throws InvalidArgument for a call no rank could run, NotSupported for
  // device buffers that `device` (the communicator's) or this build cannot
  // serve; returns the GPU holding its buffers, or -1 when they are host
  // memory.
  int validate(const Call& call, const Device& device) const;

 private:
  // Where an operation's buffers are: all in host memory (-1), or all on one
  // GPU, whose copy engine and kernels then move and reduce them.
  int operation_gpu(const Call& call, std::size_t send_bytes, std::size_t recv_bytes, const Device& device) const;
  [[noreturn]] void bad(const Call& call, const std::string& message, const std::string& hint = "") const;

  int rank_;
  int size_;
};

// The bytes of the send and receive buffers an operation touches on `rank`
// of `size` ranks, with elements of `e` bytes.
std::pair<std::size_t, std::size_t> call_extents(const coll::Call& call, int rank, int size, std::size_t e);
// The size nccl-tests reports, which the selection table is indexed by.
std::size_t reported_bytes(const coll::Call& call, int size);

}  // namespace rdmx::coll
