// SPDX-License-Identifier: MIT
// The memory layout and wire format of the collectives' message protocol
// (links.hpp): what every rank's registered region holds, and what a
// message, a progress word and a notice look like. Shared by the protocol
// (links.cpp) and the watch over stalled operations (links_watch.cpp).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "coll/links.hpp"
#include "services/wait.hpp"

namespace rdmx::coll {
namespace wire {

constexpr std::size_t kHeader = 48;
constexpr std::size_t kLine = 64;
constexpr std::size_t kNoticeText = 232;
constexpr std::uint32_t kSignalEvery = 64;  // one signaled WR in this many, so send queues recycle

// wr_id of every WR: kind in the top byte, then the Links' generation, then
// the peer. An unsignaled WR (kPlain) completes only in error, and its error
// must name its own peer. A shrunk communicator's Links share the CQ of the
// one they came from (Links::Handover), whose peers were numbered otherwise:
// the generation tells its leftover completions apart.
enum WrKind : std::uint64_t { kRecycle = 1, kPlain = 2, kDiag = 3 };  // kDiag: a READ of a peer's Progress
inline std::uint64_t make_wr_id(WrKind kind, int peer, std::uint16_t generation) {
  return (std::uint64_t{kind} << 56) | (std::uint64_t{generation} << 32) | static_cast<std::uint32_t>(peer);
}
inline WrKind wr_kind(std::uint64_t id) { return static_cast<WrKind>(id >> 56); }
inline int wr_peer(std::uint64_t id) { return static_cast<int>(id & 0xffffffffu); }
inline std::uint16_t wr_generation(std::uint64_t id) { return static_cast<std::uint16_t>(id >> 32); }

struct WireHeader {
  std::uint64_t msg;  // message number on this directed pair, from 1
  std::uint64_t seq;
  std::uint64_t count;
  std::uint64_t offset;  // of the payload within its transfer
  std::uint32_t len;
  std::int32_t root;
  std::uint16_t transfer;  // index of the transfer among this pair's transfers in the operation
  std::uint8_t op, type, redop, algo;
  std::uint16_t flags;
};
static_assert(sizeof(WireHeader) == kHeader);
// The receiver returns credit as soon as it consumed this message: the
// sender's operation waits for it before releasing the user memory the
// message was written from in place.
constexpr std::uint16_t kCreditNow = 1;
// The payload was written straight into the receiver's buffer (SendOp::rtr).
constexpr std::uint16_t kDirect = 2;
// A ready-to-receive message: its payload is an Announcement.
constexpr std::uint16_t kAnnounce = 4;

struct Announcement {
  std::uint64_t addr;
  std::uint64_t length;
  std::uint32_t rkey;
  std::uint32_t pad;
};

struct alignas(kLine) Word {
  std::atomic<std::uint64_t> value;
  char pad[kLine - sizeof(std::atomic<std::uint64_t>)];
};

// What a rank publishes about itself for peers that diagnose a stall; they
// copy it with an RDMA READ, which may land while the owner updates it.
struct Progress {
  std::uint64_t entered;  // sequence number of the last collective entered
  std::uint64_t left;     // ... and of the last one finished
  std::uint64_t count;    // the entered collective's arguments, for mismatch reports
  std::int32_t root;
  std::uint8_t op, type, redop, algo;
  // Advanced while this rank waits in a collective: a rank inside one whose
  // beat stands still is stopped or hung, not waiting like the others.
  std::uint64_t beat;
  char pad[kLine - 48];
  // Zero while the fields above change, then `entered` again: a copy whose
  // two words differ was taken mid-update and is not trusted.
  std::uint64_t entered_again;
};
static_assert(sizeof(Progress) == kLine);

// The call a message header or a progress block describes: both carry the
// same arguments, for mismatch reports.
template <typename Fields>
OpDesc described_call(const Fields& f, std::uint64_t seq) {
  OpDesc d;
  d.seq = seq;
  d.op = static_cast<CollOp>(f.op);
  d.type = static_cast<DataType>(f.type);
  d.redop = static_cast<ReduceOp>(f.redop);
  d.algo = static_cast<Algo>(f.algo);
  d.root = f.root;
  d.count = f.count;
  return d;
}

// Why a rank failed, written into every live peer's region. A peer may read
// it while it lands: another peer's abort flag can send it looking, a rank
// may replace its notice, and a provider without ordered_write_placement
// may place the bytes in any order. So the last 8 bytes seal the others
// with their hash: a notice counts once its seal matches what is there
// (ordered placement makes it land last, as one store).
struct Notice {
  std::uint64_t seq;     // the collective it happened in; 0: it applies to every operation
  std::uint32_t code;    // ErrorCode
  std::uint32_t failed;  // the rank that failed, plus one; 0: none named
  char text[kNoticeText];
  std::uint64_t seal;  // 0: no notice; else notice_seal() of the fields above
};
static_assert(sizeof(Notice) == 256 && offsetof(Notice, seal) == 248);

// Never 0, so a sealed notice differs from the zeroed region.
inline std::uint64_t notice_seal(const Notice& n) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(&n);
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (std::size_t i = 0; i < offsetof(Notice, seal); ++i) h = (h ^ bytes[i]) * 0x100000001b3ull;
  return h | 1;
}

// Message flags carry the number xor a per-pair value, so that payload bytes
// left in a slot cannot pass for a flag: both sides derive it from the
// receiver's region address and the sender's rank.
inline std::uint64_t pair_salt(std::uint64_t receiver_base, int sender) {
  std::uint64_t x = receiver_base ^ (static_cast<std::uint64_t>(sender) + 1) * 0x9e3779b97f4a7c15ULL;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x | 1;
}

inline std::size_t align_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

// Where a message's trailer (its flag, when the device places WRITEs in
// order) sits: after header and payload, 8-byte aligned.
inline std::size_t trailer_offset(std::size_t len) { return align_up(kHeader + len, 8); }

inline std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

}  // namespace wire

// Per-rank control block at the start of the region; every field the peers
// touch remotely has its own cache line.
struct Links::Control {
  wire::Word abort_flag;    // nonzero: some peer left a notice
  wire::Word abort_source;  // source word of this rank's abort-flag WRITEs
  wire::Progress progress;  // read by peers diagnosing a timeout
  wire::Notice my_notice;   // source of this rank's notices
  // followed by per-rank arrays, see Layout
};

// Offsets inside every rank's region (identical on all ranks).
struct Layout {
  using Notice = wire::Notice;
  std::size_t slot_bytes, slots, n;
  std::size_t credit, consumed, notices, diag, goodbye, inbox_flags, staging_flags, inbox, staging, total;
  Layout(std::size_t n_, const LinksConfig& c)
      : slot_bytes(wire::align_up(wire::trailer_offset(c.chunk) + 8, wire::kLine)), slots(c.slots), n(n_) {
    std::size_t off = wire::align_up(sizeof(Links::Control), 4096);
    credit = off;
    off += n * wire::kLine;
    consumed = off;
    off += n * wire::kLine;
    notices = off;
    off += n * sizeof(Notice);
    diag = off;
    off += n * wire::kLine;
    goodbye = off;
    off += n * wire::kLine;
    inbox_flags = off;
    off += n * slots * wire::kLine;
    staging_flags = off;
    off += n * slots * wire::kLine;
    off = wire::align_up(off, 4096);
    inbox = off;
    off += n * slots * slot_bytes;
    staging = off;
    off += n * slots * slot_bytes;
    total = wire::align_up(off, 4096);
  }
  std::size_t inbox_slot(int src, std::uint64_t slot) const {
    return inbox + (static_cast<std::size_t>(src) * slots + slot) * slot_bytes;
  }
  std::size_t staging_slot(int dst, std::uint64_t slot) const {
    return staging + (static_cast<std::size_t>(dst) * slots + slot) * slot_bytes;
  }
  std::size_t inbox_flag(int src, std::uint64_t slot) const {
    return inbox_flags + (static_cast<std::size_t>(src) * slots + slot) * wire::kLine;
  }
  std::size_t staging_flag(int dst, std::uint64_t slot) const {
    return staging_flags + (static_cast<std::size_t>(dst) * slots + slot) * wire::kLine;
  }
};

struct Links::Peer {
  std::unique_ptr<QueuePair> qp;
  std::uint64_t remote_base = 0;
  std::uint32_t rkey = 0;
  std::uint64_t sent = 0;      // messages posted to this peer
  std::uint64_t consumed = 0;  // messages from this peer consumed here
  std::uint64_t credited = 0;  // `consumed` as last returned to the peer
  std::uint32_t unsignaled = 0;
  std::uint64_t signaled_out = 0;  // signaled WRITEs to it not completed yet
  std::uint64_t salt = 0;          // flags of messages to this peer are their number ^ salt
  std::string failure;             // why a WR towards this peer failed
  bool posted = false;             // a WR was posted to it (a Handover's QP is then not given back)
  bool direct_writes = false;      // its device places WRITEs into registered memory itself
  // The watch over stalled runs (links_watch.cpp).
  bool reading = false;                  // a READ of its Progress is in flight
  bool fresh = false;                    // ... and has landed, not yet looked at
  core::Clock::time_point answered{};    // when a READ last came back
  core::Clock::time_point beat_moved{};  // when its beat was last seen to change
  bool beat_seen_moving = false;         // ... and that was a change between two copies, not the first copy
  std::uint64_t beat = 0;
  wire::Progress seen{};  // the last whole copy of its Progress
  bool seen_valid = false;
  bool suspect = false;  // that copy showed another call of this collective
};

}  // namespace rdmx::coll
