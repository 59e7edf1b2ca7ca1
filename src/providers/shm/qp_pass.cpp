// SPDX-License-Identifier: MIT
// A shm QP's part of the device's pass: consume the inbound ring (the
// peer's requests in order, the answers to ours, also those queued behind a
// request that waits for a receive), publish how far we executed, complete
// what was acknowledged, refill the outbound ring; and the sleeping marks
// and wake-ups that let an idle engine block.
#include <sys/socket.h>

#include <algorithm>

#include "providers/shm/shm_qp.hpp"
#include "services/asymmetric_fence.hpp"

namespace rdmx::shm {

using core::msn_before;

namespace {

constexpr int kRecordBudget = 64;  // records consumed per pass and QP
// Unrequested acknowledgements go out after this many requests: writing the
// shared `executed` word on every message would move its cache line between
// the processes twice per message.
constexpr std::uint32_t kAckBatch = 32;

bool is_request(RecordType t) {
  return t == RecordType::Send || t == RecordType::Write || t == RecordType::Read || t == RecordType::FetchAdd ||
         t == RecordType::CmpSwap;
}

}  // namespace

bool ShmQp::has_input_locked() const {
  if (!in_.attached() || state() == QpState::Error) return false;
  if (rnr_nak_sent_ && rq_.empty()) {
    // The request at the head waits for a receive: what arrives behind it counts.
    const std::uint64_t head = in_.position();
    if (in_.peek(skimmed_to_ > head ? skimmed_to_ - head : 0) != nullptr) return true;
  } else if (in_.peek() != nullptr) {
    return true;
  }
  if (sq_sent_ > 0 && ack_wanted_locked()) {
    std::uint32_t executed = out_control_->executed.load(std::memory_order_acquire);
    if (msn_before(sq_.front().msn, executed)) return true;
  }
  return false;
}

void ShmQp::set_sleeping_locked(bool sleeping) {
  if (in_control_ != nullptr && state() != QpState::Error) {
    in_control_->sleeping.store(sleeping ? 1 : 0, std::memory_order_relaxed);
  }
}

void ShmQp::wake_peer_locked() {
  if (out_control_ == nullptr || socket_ < 0) return;
  // Pairs with the sleeper's fence: it sees our records, or we see its mark.
  core::light_fence(device_.asymmetric_fence());
  if (out_control_->sleeping.load(std::memory_order_relaxed) != 0 &&
      out_control_->sleeping.exchange(0, std::memory_order_acq_rel) != 0) {
    char byte = 'w';
    [[maybe_unused]] auto ignored = ::send(socket_, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  }
}

// ---------------------------------------------------------------------------
// The pass.

std::size_t ShmQp::poll_locked() {
  ProbeRefresh refresh{this};
  if (!in_.attached()) return 0;
  std::size_t did = 0;
  bool published = false;
  if (nak_pending_ && push_control_locked(RecordType::Nak, nak_msn_, static_cast<std::uint64_t>(nak_status_))) {
    nak_pending_ = false;
    push_control_locked(RecordType::Bye, 0, 0);
    wake_peer_locked();
    close_socket_locked();
    return 1;
  }
  // The peer sends its ACCEPT before its first record, but sockets are read
  // less often than rings: an initiator that finds a record first reads the
  // ACCEPT now, so the peer's requests meet an accepted connection (regions
  // are offered only on one).
  if (initiator_ && !accepted_ && socket_ >= 0 && in_.peek() != nullptr) take_accept_locked();
  if (state() == QpState::Error) return 0;
  for (int budget = kRecordBudget; budget > 0; --budget) {
    const Record* r = in_.peek();
    if (r == nullptr) break;
    const RecordType type = r->type;
    const std::uint16_t slots = r->slots;
    Step step;
    if (type == RecordType::Pad) {
      if (slots != in_.slots_to_end()) {
        protocol_error_locked("PAD record of " + std::to_string(slots) + " slots does not end at the ring's end");
        return did;
      }
      step = Step::Done;
    } else if (is_request(type)) {
      step = execute_request_locked(r, slots);
      if (step == Step::Done) published = true;
      if (step == Step::Stall) skim_locked(slots);
    } else if (in_.position() < skimmed_to_) {
      step = Step::Done;  // handled by skim_locked() while a request ahead of it waited
    } else {
      step = handle_response_locked(r, slots, 0);
    }
    if (step != Step::Done) break;
    in_.pop(slots);
    ++did;
  }
  if (state() == QpState::Error) return did + 1;
  publish_acks_locked(false);
  complete_acknowledged_locked();
  pump_locked();
  if (published) wake_peer_locked();
  return did;
}

void ShmQp::skim_locked(std::uint16_t held_slots) {
  // The two directions of a QP are independent, as on InfiniBand: a SEND of
  // the peer that waits for our receive must not hold up the answers to our
  // READs and atomics, or NAKs, behind it in the ring. They are handled
  // here, in ring order, and popped later with the request ahead of them;
  // requests wait their turn.
  const std::uint64_t head = in_.position();
  std::uint64_t offset = std::max<std::uint64_t>(held_slots, skimmed_to_ > head ? skimmed_to_ - head : 0);
  skimmed_to_ = head + offset;
  for (int budget = kRecordBudget; budget > 0 && state() != QpState::Error; --budget) {
    const Record* r = in_.peek(offset);
    if (r == nullptr) return;
    const RecordType type = r->type;
    const std::uint16_t slots = r->slots;
    if (type == RecordType::Pad) {
      if (slots != in_.slots_to_end(offset)) {
        protocol_error_locked("PAD record of " + std::to_string(slots) + " slots does not end at the ring's end");
        return;
      }
    } else if (!in_.well_formed(slots, 0, offset)) {
      protocol_error_locked("record of " + std::to_string(slots) + " slots does not fit the ring");
      return;
    } else if (!is_request(type) && handle_response_locked(r, slots, offset) != Step::Done) {
      return;
    }
    offset += slots;
    skimmed_to_ = head + offset;
  }
}

void ShmQp::publish_acks_locked(bool force) {
  if (!in_.attached() || state() == QpState::Error) return;
  const std::uint32_t unpublished = expected_msn_ - published_msn_;
  if (unpublished != 0 && (force || ack_now_ || unpublished >= kAckBatch)) {
    in_.flush();
    in_control_->executed.store(expected_msn_, std::memory_order_release);
    published_msn_ = expected_msn_;
    ack_now_ = false;
    wake_peer_locked();
  } else if (force || in_.unflushed() * 4 >= kRingSlots) {
    in_.flush();
  }
}

}  // namespace rdmx::shm
