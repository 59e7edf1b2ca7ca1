// SPDX-License-Identifier: MIT
#include "driver/work_request.hpp"

#include <algorithm>
#include <cstdio>

namespace rdmx::core {

WcOpcode completion_opcode(Opcode op) {
  switch (op) {
    case Opcode::Send:
    case Opcode::SendWithImm: return WcOpcode::Send;
    case Opcode::RdmaWrite:
    case Opcode::RdmaWriteWithImm: return WcOpcode::RdmaWrite;
    case Opcode::RdmaRead: return WcOpcode::RdmaRead;
    case Opcode::AtomicFetchAdd: return WcOpcode::FetchAdd;
    case Opcode::AtomicCmpSwap: return WcOpcode::CompSwap;
  }
  return WcOpcode::Send;
}

std::string hex(std::uint64_t value) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(value));
  return buf;
}

QpCaps grant_qp_caps(const QpCaps& wanted, const DeviceCaps& limits, const std::string& provider) {
  if (wanted.max_send_wr > limits.max_qp_wr || wanted.max_recv_wr > limits.max_qp_wr ||
      wanted.max_send_sge > limits.max_sge || wanted.max_recv_sge > limits.max_sge) {
    throw Error(ErrorCode::InvalidArgument, "requested QP capabilities exceed the device's",
                {.op = "create_qp",
                 .sizes = "send_wr=" + std::to_string(wanted.max_send_wr) + " recv_wr=" +
                          std::to_string(wanted.max_recv_wr) + " send_sge=" + std::to_string(wanted.max_send_sge) +
                          " recv_sge=" + std::to_string(wanted.max_recv_sge),
                 .hint = provider + " allows up to " + std::to_string(limits.max_qp_wr) + " WRs and " +
                         std::to_string(limits.max_sge) + " SGEs"});
  }
  auto clamp = [](std::uint32_t v, std::uint32_t hi) { return std::clamp<std::uint32_t>(v, 1, hi); };
  QpCaps caps;
  caps.max_send_wr = clamp(wanted.max_send_wr, limits.max_qp_wr);
  caps.max_recv_wr = clamp(wanted.max_recv_wr, limits.max_qp_wr);
  caps.max_send_sge = clamp(wanted.max_send_sge, limits.max_sge);
  caps.max_recv_sge = clamp(wanted.max_recv_sge, limits.max_sge);
  caps.max_inline_data = 0;
  return caps;
}

std::uint64_t validate_send_wr(const SendWr& wr, const QpCaps& caps, std::uint64_t max_message, ContextFn context,
                               const void* qp) {
  const auto op = static_cast<std::uint8_t>(wr.opcode);
  if (op > static_cast<std::uint8_t>(Opcode::AtomicCmpSwap)) {
    throw Error(ErrorCode::InvalidArgument, "unknown opcode " + std::to_string(op), context(qp, "post_send"));
  }
  // The error context is built only on failure: posting is a hot path.
  auto reject = [&](const std::string& message, std::string sizes, std::string hint) {
    ErrorContext ctx = context(qp, std::string("post_send ") + to_string(wr.opcode));
    ctx.sizes = std::move(sizes);
    ctx.hint = std::move(hint);
    throw Error(ErrorCode::InvalidArgument, message, ctx);
  };
  if (wr.sg_list.size() > caps.max_send_sge) {
    reject("too many scatter-gather elements",
           "num_sge=" + std::to_string(wr.sg_list.size()) + " max_send_sge=" + std::to_string(caps.max_send_sge),
           "create the QP with a larger QpCaps::max_send_sge");
  }
  std::uint64_t total = 0;
  for (const auto& sge : wr.sg_list) total += sge.length;
  if (total > max_message) {
    reject("message larger than " + std::to_string(max_message >> 20) + " MiB", "length=" + std::to_string(total),
           "split the transfer: a message is at most " + std::to_string(max_message) + " bytes");
  }
  if (is_atomic(wr.opcode) &&
      (wr.sg_list.size() != 1 || wr.sg_list[0].length != 8 || wr.sg_list[0].addr % 8 != 0 || wr.remote_addr % 8 != 0)) {
    reject("malformed atomic work request",
           "num_sge=" + std::to_string(wr.sg_list.size()) + " remote_addr=" + hex(wr.remote_addr) +
               (wr.sg_list.empty()
                    ? ""
                    : " local_addr=" + hex(wr.sg_list[0].addr) + " local_len=" + std::to_string(wr.sg_list[0].length)),
           "atomics take one 8-byte, 8-byte-aligned local SGE and an 8-byte-aligned remote address");
  }
  return is_atomic(wr.opcode) ? 8 : total;
}

std::uint64_t validate_recv_wr(const RecvWr& wr, const QpCaps& caps, ContextFn context, const void* qp) {
  if (wr.sg_list.size() > caps.max_recv_sge) {
    ErrorContext ctx = context(qp, "post_recv");
    ctx.sizes = "num_sge=" + std::to_string(wr.sg_list.size()) + " max_recv_sge=" + std::to_string(caps.max_recv_sge);
    ctx.hint = "create the QP with a larger QpCaps::max_recv_sge";
    throw Error(ErrorCode::InvalidArgument, "too many scatter-gather elements", ctx);
  }
  std::uint64_t capacity = 0;
  for (const auto& sge : wr.sg_list) capacity += sge.length;
  return capacity;
}

}  // namespace rdmx::core
