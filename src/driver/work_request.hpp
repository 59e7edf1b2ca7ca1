// SPDX-License-Identifier: MIT
// What every provider checks and derives from a work request the same way:
// its shape (SGE count, size, atomic alignment), the QP capabilities a device
// grants, and the completion opcode a work request produces.
#pragma once

#include <cstdint>
#include <string>

#include "rdmx/verbs.hpp"

namespace rdmx::core {

inline bool is_atomic(Opcode op) { return op == Opcode::AtomicFetchAdd || op == Opcode::AtomicCmpSwap; }
// SEND and WRITE carry the initiator's bytes to the target.
inline bool carries_payload(Opcode op) {
  return op == Opcode::Send || op == Opcode::SendWithImm || op == Opcode::RdmaWrite || op == Opcode::RdmaWriteWithImm;
}
WcOpcode completion_opcode(Opcode op);
std::string hex(std::uint64_t value);  // "0x1f"

// The capabilities a QP gets: `wanted`, each at least 1; throws
// InvalidArgument naming `provider` when a request exceeds the device.
QpCaps grant_qp_caps(const QpCaps& wanted, const DeviceCaps& limits, const std::string& provider);

// Builds the context of an error about `op` (called only on failure; a plain
// function pointer, so posting builds no std::function).
using ContextFn = ErrorContext (*)(const void* qp, const std::string& op);

// Throws InvalidArgument for a malformed send work request (unknown opcode,
// too many SGEs, larger than max_message, malformed atomic); returns its
// byte count.
std::uint64_t validate_send_wr(const SendWr& wr, const QpCaps& caps, std::uint64_t max_message, ContextFn context,
                               const void* qp);
// The error post_send_batch() throws for the `index`th of `count` work requests.
Error batch_error(const Error& e, std::size_t index, std::size_t count, std::uint64_t wr_id);

// Throws InvalidArgument when a receive has too many SGEs; returns its capacity.
std::uint64_t validate_recv_wr(const RecvWr& wr, const QpCaps& caps, ContextFn context, const void* qp);

}  // namespace rdmx::core
