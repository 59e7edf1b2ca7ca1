// SPDX-License-Identifier: MIT
// The tcp provider's wire format: every frame is a fixed 48-byte header,
// little-endian, optionally followed by `length` payload bytes. The header
// carries a magic number and a version, and every field is validated by the
// receiver before anything is touched (see validate()).
#pragma once

#include <cstdint>
#include <cstring>

#include "providers/soft_rc/connection.hpp"

namespace rdmx::tcp::wire {

constexpr std::uint32_t kMagic = 0x58444d52;  // "RMDX" little-endian
// 3: both ends of a connection prove the job secret (2: only the connector).
constexpr std::uint8_t kVersion = 3;
constexpr std::size_t kHeaderSize = 48;
// Large messages travel as frames of at most this many payload bytes, so one
// huge transfer cannot monopolise the progress engine or a socket.
constexpr std::uint32_t kMaxChunk = 256 * 1024;
// A message's last frame may run up to this far past kMaxChunk rather than
// leave a few bytes to a frame of their own: a collective's slot message is
// 256 KiB of payload plus its 48-byte header and 8-byte flag, and the second
// frame cost a send, a receive and a header on each side.
constexpr std::uint32_t kChunkSlack = 4096;
constexpr std::uint32_t kMaxFrame = kMaxChunk + kChunkSlack;
// Payload bytes of the frame at `offset` of a `total`-byte message.
inline std::uint32_t frame_length(std::uint64_t total, std::uint64_t offset) {
  const std::uint64_t left = total - offset;
  return static_cast<std::uint32_t>(left <= kMaxFrame ? left : kMaxChunk);
}
// Largest message (IB's limit is 2 GiB).
constexpr std::uint64_t kMaxMessage = 1ull << 31;

enum class FrameType : std::uint8_t {
  Hello = 1,        // first frame of a connection: who I am, which QP I want
  SendReq = 2,      // SEND / SEND_WITH_IMM payload chunk
  WriteReq = 3,     // RDMA WRITE (WITH_IMM) payload chunk
  ReadReq = 4,      // RDMA READ request
  FetchAddReq = 5,  // atomic fetch-and-add request
  AckReq = 6,       // "are you there?": asks the responder for an ACK
  ReadResp = 7,     // RDMA READ response payload chunk
  AtomicResp = 8,   // original value of an atomic
  Ack = 9,          // cumulative acknowledgement (ack_msn)
  Nak = 10,         // negative acknowledgement of request `msn`
  CmpSwapReq = 11,  // atomic compare-and-swap request
  Bye = 12,         // the sender destroys its QP in order: what it acknowledged is all it will
  Challenge = 13,   // the acceptor's first frame: a fresh challenge the HELLO must answer
  Refused = 14,     // the acceptor's answer to a HELLO whose proof did not verify; then it closes
  Accept = 15,      // the acceptor's answer to a HELLO whose proof verified: its own proof in return
};

// Authentication is mutual (services/auth.hpp). The acceptor's CHALLENGE carries
// a fresh challenge; the connector's HELLO carries its proof over it and a
// fresh challenge of its own; the acceptor's ACCEPT carries its proof over
// that one. The connector acts on no frame, and sends none, before the ACCEPT
// verifies. The two purposes differ, so a proof cannot be reflected back.
constexpr const char* kAuthPurpose = "rdmx tcp qp hello v3";
constexpr const char* kAcceptPurpose = "rdmx tcp qp accept v3";
constexpr std::uint32_t kChallengePayload = 32;
constexpr std::uint32_t kProofPayload = 32;
constexpr std::uint32_t kHelloPayload = kProofPayload + kChallengePayload;

enum Flags : std::uint16_t {
  kFirst = 1u << 0,      // first frame of a message
  kLast = 1u << 1,       // last frame of a message
  kAckNow = 1u << 2,     // requester wants an ACK promptly (signaled WR, full queue)
  kWithImm = 1u << 3,    // the message carries immediate data (every chunk; the value rides on the last)
  kAckValid = 1u << 4,   // ack_msn is valid (piggybacked acknowledgement)
  kRespError = 1u << 5,  // ReadResp: the responder failed mid-response; syndrome in arg0
  kKnownFlags = (1u << 6) - 1,
};

// Why a request was refused (Nak.arg0, ReadResp error).
enum class Syndrome : std::uint8_t {
  Rnr = 1,        // no receive posted: retry later
  RemAccess = 2,  // key, bounds or rights
  RemInvReq = 3,  // malformed request or larger than the receive buffer
  RemOp = 4,      // responder failed to carry it out
};

// Field use per frame type:
//   Challenge:  arg0 = 1 when the acceptor has a job secret (a proof is required);
//               payload: the challenge
//   Hello:      addr = sender device nonce, arg0 = target device nonce,
//               rkey = sender qpn, arg1 = target qpn; payload: the proof
//               (HMAC over the CHALLENGE's challenge and this header), then
//               the connector's challenge
//   Accept:     payload: the proof (HMAC over the HELLO's challenge, bound to
//               the CHALLENGE's); all zeros from an acceptor without a secret
//   Refused:    no fields
//   SendReq:    msn, length; First: arg0 = total length; WithImm: arg1 = imm
//   WriteReq:   msn, length, rkey, addr (of this chunk); First: arg0 = total length; WithImm: arg1 = imm
//   ReadReq:    msn, rkey, addr, arg0 = length
//   FetchAddReq: msn, rkey, addr, arg0 = addend
//   CmpSwapReq: msn, rkey, addr, arg0 = compare, arg1 = swap
//   ReadResp:   msn, length, arg1 = offset of this chunk in the message
//   AtomicResp: msn, arg0 = original value
//   Ack:        ack_msn
//   Nak:        msn, arg0 = Syndrome
struct Header {
  std::uint32_t magic = kMagic;
  std::uint8_t version = kVersion;
  FrameType type = FrameType::Ack;
  std::uint16_t flags = 0;
  std::uint32_t msn = 0;
  std::uint32_t ack_msn = 0;
  std::uint32_t length = 0;
  std::uint32_t rkey = 0;
  std::uint64_t addr = 0;
  std::uint64_t arg0 = 0;
  std::uint64_t arg1 = 0;
};
static_assert(sizeof(Header) == kHeaderSize, "wire header must be 48 bytes");
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the wire format is little-endian; add byte swaps");

inline void encode(const Header& header, std::uint8_t* out) { std::memcpy(out, &header, kHeaderSize); }
inline Header decode(const std::uint8_t* in) {
  Header header;
  std::memcpy(&header, in, kHeaderSize);
  return header;
}

// The HELLO frame and the connection it names (the field mapping above).
inline Header hello_frame(const core::ConnectionIds& ids) {
  Header h;
  h.type = FrameType::Hello;
  h.addr = ids.source_nonce;
  h.arg0 = ids.target_nonce;
  h.rkey = ids.source_qpn;
  h.arg1 = ids.target_qpn;
  h.length = kHelloPayload;
  return h;
}
inline core::ConnectionIds hello_ids(const Header& h) {
  return {.target_nonce = h.arg0,
          .target_qpn = static_cast<std::uint32_t>(h.arg1),
          .source_qpn = h.rkey,
          .source_nonce = h.addr};
}

// Structural checks that need no QP state. Returns nullptr when the header is
// well formed, else what is wrong (for the log and the QP's error reason).
const char* validate(const Header& header);
const char* to_string(FrameType type);

}  // namespace rdmx::tcp::wire
