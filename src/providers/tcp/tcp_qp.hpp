// SPDX-License-Identifier: MIT
// An RC queue pair of the tcp provider: one TCP connection per QP carrying
// both directions (our requests and the responses to the peer's requests).
//
// Requester: work requests get consecutive message sequence numbers (MSN) and
// are sent in order, large ones as 256 KiB frames. The responder acknowledges
// cumulatively (piggybacked on any frame it sends, or in an ACK), answers
// READ and atomics, and NAKs what it refuses. Completions are produced in MSN
// order. A SEND that finds no receive gets an RNR NAK: the requester goes back
// to that MSN and retransmits after a delay, until the RNR timeout.
//
// Where it lives: the connection in tcp_qp.cpp, the requester (frames out,
// answers in) in qp_requester.cpp, the responder (one handler per request
// type) in qp_responder.cpp, frame reception and payload placement in
// qp_receive.cpp; queues, completions and errors in core::SoftRcQp.
#pragma once

#include <sys/uio.h>

#include <array>
#include <deque>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "driver/completion_queue.hpp"
#include "driver/memory_registry.hpp"
#include "driver/work_request.hpp"
#include "providers/soft_rc/qp.hpp"
#include "providers/tcp/address.hpp"
#include "providers/tcp/tcp_device.hpp"
#include "providers/tcp/wire.hpp"
#include "services/auth.hpp"
#include "services/cuda/pinned.hpp"
#include "services/mutex.hpp"
#include "services/thread_annotations.hpp"

namespace rdmx::tcp {

constexpr std::uint32_t kMaxSge = core::kSoftMaxSge;

using core::hex;
using wire::FrameType;
using wire::Header;
using wire::Syndrome;

// Scratch space for payload that is received only to be thrown away.
constexpr std::size_t kDiscardBuffer = 64 * 1024;
std::uint8_t* discard_buffer();

class TcpQp final : public core::SoftRcQp {
 public:
  TcpQp(TcpDevice& device, const core::QpParts& parts, const QpCaps& caps);
  ~TcpQp() override;

  void connect(const QpAddress& remote, const ConnectOptions& options) override;

  // ---- the device's calls, device lock held (each takes the QP's own) ----
  bool on_socket_locked(std::uint32_t events) override RDMX_REQUIRES(device_lock_);
  bool on_timer_locked(core::Clock::time_point now) override RDMX_REQUIRES(device_lock_);
  core::Offer offer_locked(const core::PendingConnection& pending) override RDMX_REQUIRES(device_lock_);
  // For the spinning fast path: the socket to poll() and the events that
  // matter now, or -1 when the QP is not exchanging frames.
  int poll_fd(short& events);
  int socket_fd() const;

 private:
  using SendEntry = core::SendEntry;
  using RecvEntry = core::RecvEntry;
  struct ReadJob {
    std::uint32_t msn;
    std::uint64_t addr;
    std::uint32_t rkey;
    std::uint64_t total;
    std::uint64_t offset;
  };
  // A request message being received (responder side).
  struct Incoming {
    bool active = false;
    wire::FrameType type{};
    std::uint32_t msn = 0;
    std::uint64_t total = 0;
    std::uint64_t done = 0;
    std::uint64_t base = 0;
    std::uint32_t rkey = 0;
    bool with_imm = false;
    bool has_recv = false;
    RecvEntry recv{};
  };
  enum class RxTarget : std::uint8_t { Discard, RemoteWrite, RecvBuffer, ReadResult };
  // The frame being written to the socket.
  struct TxFrame {
    bool active = false;
    // The header, followed by small payloads copied in so the frame leaves in one piece.
    std::uint8_t header[wire::kHeaderSize + 256];
    std::array<iovec, kMaxSge + 1> iov{};
    int iov_count = 0;
    int first_iov = 0;
    std::size_t left = 0;
    // READ responses are re-checked against the registry while they are sent.
    bool remote_source = false;
    std::uint32_t rkey = 0;
    std::uint64_t addr = 0;
    std::uint64_t length = 0;
  };

  // Frame handlers, indexed by frame type.
  using FrameHandler = bool (TcpQp::*)(const Header&);
  using FrameHandlers = std::array<FrameHandler, 16>;
  static constexpr FrameHandlers frame_handlers(std::initializer_list<std::pair<FrameType, FrameHandler>> entries) {
    FrameHandlers table{};
    for (const auto& [type, handler] : entries) table[static_cast<std::size_t>(type)] = handler;
    return table;
  }
  // Runs the handler of h's type; a type without one is a protocol error.
  bool run_handler_locked(const FrameHandlers& handlers, const Header& h, const char* kind) RDMX_REQUIRES(this);

  // The engine's hooks (core::SoftRcQp).
  void lock_state() override RDMX_ACQUIRE();
  void unlock_state() override RDMX_RELEASE();
  void send_queued_locked(SendEntry& entry) override RDMX_REQUIRES(this);
  bool copies_device_payloads() const override { return true; }
  void error_entered_locked() override RDMX_REQUIRES(this);
  bool peer_left_in_order_locked(const std::string& reason) const override RDMX_REQUIRES(this);

  // Sending (qp_requester.cpp).
  void pump_locked(int frame_budget) RDMX_REQUIRES(this);
  bool send_small_now_locked(const SendEntry& e) RDMX_REQUIRES(this);
  // Whether the next request may go (it may be staged on the way: see
  // SoftRcQp::ready_to_send_locked).
  bool requests_to_send_locked() RDMX_REQUIRES(this);
  bool has_data_frames_locked() RDMX_REQUIRES(this);
  // Points the READ answer frame being built at a host copy when the job's
  // region is device memory; false (the QP failed) when that failed.
  bool stage_device_source_locked(const ReadJob& job, std::uint32_t chunk) RDMX_REQUIRES(this);
  // Copies bytes [offset, offset + length) of a request's payload, which
  // includes device memory, to device_payload_ and points the frame there;
  // false when an SGE is no longer registered or the copy failed (the QP is
  // then in ERROR).
  bool copy_device_payload_locked(const SendEntry& e, std::uint64_t offset, std::uint32_t length) RDMX_REQUIRES(this);
  bool build_frame_locked() RDMX_REQUIRES(this);
  bool write_frame_locked() RDMX_REQUIRES(this);
  void set_want_write_locked(bool want) RDMX_REQUIRES(this);
  // Adds (EPOLL_CTL_ADD) or changes (EPOLL_CTL_MOD) the device's watch on this QP's socket.
  void watch_socket_locked(int operation, std::uint32_t events) RDMX_REQUIRES(this);
  void queue_control_locked(wire::Header header) RDMX_REQUIRES(this);
  void finish_header_locked(wire::Header& header) RDMX_REQUIRES(this);
  int gather_locked(const std::array<Sge, kMaxSge>& sges, std::uint32_t num_sge, std::uint64_t offset,
                    std::uint64_t length, iovec* iov, const core::MemoryRegistry::Reader* writable) RDMX_REQUIRES(this);
  // Answers to our requests (qp_requester.cpp), one handler per frame type.
  bool handle_response_locked(const wire::Header& h) RDMX_REQUIRES(this);
  bool on_bye_locked(const wire::Header& h) RDMX_REQUIRES(this);
  bool on_ack_locked(const wire::Header& h) RDMX_REQUIRES(this);
  bool on_read_response_locked(const wire::Header& h) RDMX_REQUIRES(this);
  bool on_atomic_response_locked(const wire::Header& h) RDMX_REQUIRES(this);
  bool on_nak_locked(const wire::Header& h) RDMX_REQUIRES(this);
  void process_ack_locked(std::uint32_t ack_msn) RDMX_REQUIRES(this);
  void complete_in_order_locked() RDMX_REQUIRES(this);
  SendEntry* entry_for_msn_locked(std::uint32_t msn) RDMX_REQUIRES(this);
  // Receiving (qp_receive.cpp).
  bool receive_locked(int frame_budget) RDMX_REQUIRES(this, device_lock_);
  bool fill_read_ahead_locked() RDMX_REQUIRES(this);
  bool dispatch_header_locked(const wire::Header& h) RDMX_REQUIRES(this);
  bool consume_payload_locked() RDMX_REQUIRES(this);
  void start_discard_locked(const wire::Header& h) RDMX_REQUIRES(this);
  std::size_t deliver_locked(const std::uint8_t* from, std::size_t n) RDMX_REQUIRES(this);
  void finish_frame_locked() RDMX_REQUIRES(this);
  // The peer's requests (qp_responder.cpp): admitted in order, then one handler per type.
  bool handle_request_locked(const wire::Header& h) RDMX_REQUIRES(this);
  bool continue_message_locked(const wire::Header& h) RDMX_REQUIRES(this);
  bool on_ack_request_locked(const wire::Header& h) RDMX_REQUIRES(this);
  bool on_send_request_locked(const wire::Header& h) RDMX_REQUIRES(this);
  bool on_write_request_locked(const wire::Header& h) RDMX_REQUIRES(this);
  bool on_read_request_locked(const wire::Header& h) RDMX_REQUIRES(this);
  bool on_atomic_request_locked(const wire::Header& h) RDMX_REQUIRES(this);
  bool first_chunk_fits_locked(const wire::Header& h) RDMX_REQUIRES(this);
  // SEND and WRITE_WITH_IMM consume a receive. Without one, the requester is
  // told RNR, the message is discarded, and this returns false.
  bool take_receive_locked(const wire::Header& h) RDMX_REQUIRES(this);
  bool begin_message_locked(const wire::Header& h, bool with_imm) RDMX_REQUIRES(this);
  // A request message is complete: the next MSN is expected and it is owed an ACK.
  void request_executed_locked(std::uint16_t flags) RDMX_REQUIRES(this);
  void nak_locked(std::uint32_t msn, wire::Syndrome syndrome, const std::string& why) RDMX_REQUIRES(this);
  // Connection (tcp_qp.cpp).
  void start_connect_locked() RDMX_REQUIRES(this);
  void schedule_connect_retry_locked(int error) RDMX_REQUIRES(this);
  void schedule_connect_retry_locked(const std::string& failure) RDMX_REQUIRES(this);
  // Initiator: reads the acceptor's challenge and answers with HELLO, its proof and a challenge.
  void read_challenge_locked() RDMX_REQUIRES(this);
  // Initiator: reads the acceptor's ACCEPT (or REFUSED) and checks its proof.
  void read_accept_locked() RDMX_REQUIRES(this);
  // Initiator: the acceptor did not prove the job secret; says what to check.
  void refuse_acceptor_locked(const std::string& why) RDMX_REQUIRES(this);
  void on_connected_locked() RDMX_REQUIRES(this);
  void attach_locked(int fd) RDMX_REQUIRES(this);
  // Connected and exchanging frames (not closed, not draining after an error).
  bool live_locked() const RDMX_REQUIRES(this) { return fd_ >= 0 && !draining_; }
  void begin_drain_locked() RDMX_REQUIRES(this);
  void drain_locked() RDMX_REQUIRES(this);
  void close_socket_locked() RDMX_REQUIRES(this);
  // Destruction in order: a BYE (carrying the final acknowledgement) and a
  // shut-down write side, the socket left to the device to linger on.
  void say_goodbye_locked() RDMX_REQUIRES(this, device_.lock());
  void protocol_error_locked(const std::string& what) RDMX_REQUIRES(this);

  TcpDevice& device_;
  mutable core::Mutex mutex_;  // the state lock (lock_state())
  TcpAddress remote_ RDMX_GUARDED_BY(this){};

  // Connection.
  int fd_ RDMX_GUARDED_BY(this) = -1;
  bool connecting_ RDMX_GUARDED_BY(this) = false;          // initiator: TCP connect or authentication in flight
  bool awaiting_challenge_ RDMX_GUARDED_BY(this) = false;  // initiator: connected, no HELLO sent yet
  bool awaiting_accept_ RDMX_GUARDED_BY(this) = false;     // initiator: HELLO sent, the acceptor's proof not in
  std::array<std::uint8_t, wire::kHeaderSize + wire::kChallengePayload> challenge_ RDMX_GUARDED_BY(this){};
  std::size_t challenge_got_ RDMX_GUARDED_BY(this) = 0;
  core::auth::Challenge own_challenge_ RDMX_GUARDED_BY(this){};  // what the acceptor's ACCEPT must answer
  std::array<std::uint8_t, wire::kHeaderSize + wire::kProofPayload> accept_ RDMX_GUARDED_BY(this){};
  std::size_t accept_got_ RDMX_GUARDED_BY(this) = 0;
  bool established_ RDMX_GUARDED_BY(this) = false;
  bool want_write_ RDMX_GUARDED_BY(this) = false;
  bool tx_blocked_ RDMX_GUARDED_BY(this) = false;     // the last send hit EAGAIN: wait for EPOLLOUT
  bool draining_ RDMX_GUARDED_BY(this) = false;       // ERROR: NAK sent, reading until the peer closes
  bool peer_said_bye_ RDMX_GUARDED_BY(this) = false;  // the peer destroyed its QP in order: its end of file is no crash
  bool write_shut_ RDMX_GUARDED_BY(this) = false;
  core::Clock::time_point drain_deadline_ RDMX_GUARDED_BY(this){};
  std::chrono::milliseconds retry_backoff_ RDMX_GUARDED_BY(this){5};
  // The initiator's attempts: when the current one started, how many went
  // unanswered or failed, and why the last one did (for the timeout's error).
  core::Clock::time_point attempt_started_ RDMX_GUARDED_BY(this){};
  int failed_attempts_ RDMX_GUARDED_BY(this) = 0;
  std::string last_attempt_failure_ RDMX_GUARDED_BY(this);
  core::Clock::time_point last_rx_ RDMX_GUARDED_BY(this){};
  bool ack_request_sent_ RDMX_GUARDED_BY(this) = false;
  bool rx_seen_ RDMX_GUARDED_BY(this) = false;  // bytes arrived since the last timer scan (which stamps last_rx_)

  // Requester.
  std::uint32_t tx_msn_ RDMX_GUARDED_BY(this) = 0;         // next WR to put on the wire
  std::uint64_t tx_offset_ RDMX_GUARDED_BY(this) = 0;      // bytes of that WR already framed
  std::uint32_t sent_msn_high_ RDMX_GUARDED_BY(this) = 0;  // every MSN before this has started on the wire
  bool rnr_paused_ RDMX_GUARDED_BY(this) = false;
  std::uint32_t rnr_msn_ RDMX_GUARDED_BY(this) = 0;
  core::Clock::time_point rnr_resume_at_ RDMX_GUARDED_BY(this){};

  // Responder.
  std::uint32_t expected_msn_ RDMX_GUARDED_BY(this) = 0;
  bool ack_pending_ RDMX_GUARDED_BY(this) = false;  // executed requests not yet acknowledged
  bool ack_now_ RDMX_GUARDED_BY(this) = false;      // ... and the requester asked for it promptly
  bool rnr_discarding_ RDMX_GUARDED_BY(this) = false;
  std::uint32_t rnr_discard_msn_ RDMX_GUARDED_BY(this) = 0;
  Incoming incoming_ RDMX_GUARDED_BY(this);
  std::uint8_t tail_hold_[8] RDMX_GUARDED_BY(this) = {};  // a WRITE's last word, stored after the rest of it
  // Device memory is never the socket's: WRITE payloads for it land here
  // first, READ answers from it are copied here before they are sent (one
  // frame's payload each, page-locked for the GPU).
  core::cuda::PinnedBuffer device_landing_ RDMX_GUARDED_BY(this);
  core::cuda::PinnedBuffer device_source_ RDMX_GUARDED_BY(this);
  core::cuda::PinnedBuffer device_payload_ RDMX_GUARDED_BY(this);  // a request's piece from device memory
  std::deque<ReadJob> read_jobs_ RDMX_GUARDED_BY(this);
  std::deque<wire::Header> control_ RDMX_GUARDED_BY(this);
  bool serve_reads_next_ RDMX_GUARDED_BY(this) = false;

  // Frame I/O.
  TxFrame tx_ RDMX_GUARDED_BY(this);
  static constexpr std::size_t kReadAhead = 4096;
  std::array<std::uint8_t, kReadAhead> rx_buf_ RDMX_GUARDED_BY(this){};
  std::size_t rx_begin_ RDMX_GUARDED_BY(this) = 0;
  std::size_t rx_end_ RDMX_GUARDED_BY(this) = 0;
  bool rx_in_payload_ RDMX_GUARDED_BY(this) = false;
  wire::Header rx_header_ RDMX_GUARDED_BY(this){};
  std::uint32_t rx_left_ RDMX_GUARDED_BY(this) = 0;
  RxTarget rx_target_ RDMX_GUARDED_BY(this) = RxTarget::Discard;
  std::uint64_t rx_target_offset_ RDMX_GUARDED_BY(this) = 0;  // offset in the message / READ result
  bool last_frame_large_ RDMX_GUARDED_BY(this) = false;
  bool rx_drained_ RDMX_GUARDED_BY(this) = false;  // this receive pass's last read-ahead came back short
};

}  // namespace rdmx::tcp
