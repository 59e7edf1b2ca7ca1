// SPDX-License-Identifier: MIT
#include "providers/tcp/wire.hpp"

namespace rdmx::tcp::wire {

const char* to_string(FrameType type) {
  switch (type) {
    case FrameType::Hello: return "HELLO";
    case FrameType::SendReq: return "SEND_REQ";
    case FrameType::WriteReq: return "WRITE_REQ";
    case FrameType::ReadReq: return "READ_REQ";
    case FrameType::FetchAddReq: return "FETCH_ADD_REQ";
    case FrameType::CmpSwapReq: return "CMP_SWAP_REQ";
    case FrameType::AckReq: return "ACK_REQ";
    case FrameType::ReadResp: return "READ_RESP";
    case FrameType::AtomicResp: return "ATOMIC_RESP";
    case FrameType::Ack: return "ACK";
    case FrameType::Nak: return "NAK";
    case FrameType::Bye: return "BYE";
    case FrameType::Challenge: return "CHALLENGE";
    case FrameType::Refused: return "REFUSED";
    case FrameType::Accept: return "ACCEPT";
  }
  return "UNKNOWN";
}

const char* validate(const Header& h) {
  if (h.magic != kMagic) return "bad magic number (not an rdmx tcp frame)";
  if (h.version != kVersion) return "unsupported wire version";
  if ((h.flags & ~kKnownFlags) != 0) return "unknown flag bits";
  if (h.type == FrameType::Hello && h.length != kHelloPayload) return "HELLO without its proof and challenge";
  if (h.type == FrameType::Accept && h.length != kProofPayload) return "ACCEPT without its proof";
  if (h.type == FrameType::Challenge && h.length != kChallengePayload) return "CHALLENGE of the wrong length";
  const bool has_payload = h.type == FrameType::SendReq || h.type == FrameType::WriteReq ||
                           h.type == FrameType::ReadResp || h.type == FrameType::Hello ||
                           h.type == FrameType::Challenge || h.type == FrameType::Accept;
  if (!has_payload && h.length != 0) return "payload on a frame type that carries none";
  if (h.length > kMaxFrame) return "frame payload larger than the maximum chunk (plus its slack)";
  switch (h.type) {
    case FrameType::SendReq:
    case FrameType::WriteReq:
      if ((h.flags & kFirst) && h.arg0 > kMaxMessage) return "message length above 2 GiB";
      if ((h.flags & kFirst) && h.length > h.arg0) return "first chunk longer than its message";
      if (!(h.flags & kWithImm) && h.arg1 != 0) return "immediate data without the WITH_IMM flag";
      if (h.flags & kRespError) return "error flag on a request";
      return nullptr;
    case FrameType::ReadReq:
      if (h.arg0 > kMaxMessage) return "READ length above 2 GiB";
      return nullptr;
    case FrameType::FetchAddReq:
    case FrameType::CmpSwapReq: return nullptr;  // alignment is the responder's call: it answers REM_INV_REQ
    case FrameType::Nak:
      if (h.arg0 < static_cast<std::uint64_t>(Syndrome::Rnr) || h.arg0 > static_cast<std::uint64_t>(Syndrome::RemOp)) {
        return "unknown NAK syndrome";
      }
      return nullptr;
    case FrameType::Challenge:
      if (h.arg0 > 1) return "CHALLENGE with an unknown requirement";
      return nullptr;
    case FrameType::Hello:
    case FrameType::Accept:
    case FrameType::Refused:
    case FrameType::AckReq:
    case FrameType::ReadResp:
    case FrameType::AtomicResp:
    case FrameType::Ack:
    case FrameType::Bye: return nullptr;
  }
  return "unknown frame type";
}

}  // namespace rdmx::tcp::wire
