// SPDX-License-Identifier: MIT
#include "membership/membership.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "membership/overlay.hpp"
#include "rdmx/error.hpp"
#include "services/little_endian.hpp"
#include "services/log.hpp"

namespace rdmx::membership {
namespace {

constexpr std::size_t kMaxQueuedBytes = std::size_t{1} << 20;

std::string seconds_text(std::chrono::milliseconds ms) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", static_cast<double>(ms.count()) / 1000.0);
  return text;
}

// A tenth of the timeout, from 20 ms to 1 s; and no more than about
// kBeatsPerSecond beats a second from each rank, up to a quarter of the
// timeout: a rank beats to each peer it is connected to, so the machine's
// share of beats grows with its ranks times their connections.
constexpr int kBeatsPerSecond = 64;

std::chrono::milliseconds heartbeat_period(std::chrono::milliseconds timeout, int connections) {
  if (timeout.count() < 0) return std::chrono::milliseconds(1000);
  const auto period = std::clamp(timeout / 10, std::chrono::milliseconds(20), std::chrono::milliseconds(1000));
  const auto spread = std::chrono::milliseconds(1000 * std::max(connections, 0) / kBeatsPerSecond);
  return std::max(period, std::min(spread, timeout / 4));
}

// The epoll ids past the peers' ranks.
enum : std::uint32_t { kWakeId = 0, kHandshakeId = 1 };

}  // namespace

const char* to_string(Verdict::Outcome outcome) noexcept {
  switch (outcome) {
    case Verdict::Outcome::Go: return "go on";
    case Verdict::Outcome::Excluded: return "excluded";
    case Verdict::Outcome::Minority: return "minority";
    case Verdict::Outcome::TieLost: return "tie lost";
    case Verdict::Outcome::TieUnresolved: return "tie unresolved";
  }
  return "?";
}

struct Membership::Peer {
  explicit Peer(std::size_t max_payload) : reader(max_payload) {}
  FrameReader reader;
  std::vector<std::uint8_t> out;
  std::size_t out_start = 0;
  core::Clock::time_point heard{};
  core::Clock::time_point connecting_since{};  // a connection was asked for and is not made yet
  bool open = false;
  bool lost = false;  // suspected failed
  bool left = false;  // said goodbye
  bool watching_out = false;
};

Membership::Membership(std::shared_ptr<Store> store, const std::string& tag, int rank, int size,
                       std::chrono::milliseconds timeout, FailureHandler on_failure)
    : store_(std::move(store)),
      tag_(tag),
      rank_(rank),
      size_(size),
      timeout_(timeout),
      mesh_(*store_, tag, rank, size,
            core::deadline_after(timeout.count() < 0 ? std::chrono::milliseconds(-1) : timeout)),
      epoll_(::epoll_create1(EPOLL_CLOEXEC)),
      wake_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      agreement_(rank, size) {
  if (!epoll_ || !wake_fd_) {
    throw Error(ErrorCode::System, std::string("membership: epoll/eventfd: ") + std::strerror(errno),
                ErrorContext{.op = "membership", .rank = rank});
  }
  heartbeat_ = heartbeat_period(timeout, static_cast<int>(mesh_.overlay().size()));
  const std::size_t max_payload =
      std::max(4 + (static_cast<std::size_t>(size) + 7) / 8, 8 + BruckSteps::max_message_bytes(size));
  {
    core::LockGuard lock(mutex_);
    peers_.reserve(static_cast<std::size_t>(size));
    reasons_.assign(static_cast<std::size_t>(size), "");
    for (int p = 0; p < size; ++p) peers_.emplace_back(max_payload);
    for (int p = 0; p < size; ++p) {
      if (mesh_.fd(p) >= 0) open_peer(p);
    }
    watch_handshakes();
  }
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u32 = static_cast<std::uint32_t>(size) + kWakeId;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_fd_.get(), &event);
  if (on_failure) subscribe(std::move(on_failure));
  thread_ = std::thread([this] { run(); });
}

int Membership::connections() const {
  core::LockGuard lock(mutex_);
  return static_cast<int>(std::count_if(peers_.begin(), peers_.end(), [](const Peer& peer) { return peer.open; }));
}

int Membership::subscribe(FailureHandler handler) {
  core::LockGuard lock(handlers_mutex_);
  for (const Loss& loss : losses_) handler(loss.peer, loss.timed_out, loss.why);
  handlers_.emplace_back(next_handler_, std::move(handler));
  return next_handler_++;
}

void Membership::unsubscribe(int id) {
  core::LockGuard lock(handlers_mutex_);
  std::erase_if(handlers_, [id](const auto& entry) { return entry.first == id; });
}

Membership::~Membership() {
  stopping_.store(true, std::memory_order_release);
  wake();
  if (thread_.joinable()) thread_.join();
  core::LockGuard lock(mutex_);
  for (int p = 0; p < size_; ++p) {
    if (!peers_[static_cast<std::size_t>(p)].open) continue;
    queue_frame(p, FrameKind::Bye, 0, {});
    flush(p);
    close_peer(p);
  }
}

void Membership::wake() noexcept {
  const std::uint64_t one = 1;
  [[maybe_unused]] ssize_t written = ::write(wake_fd_.get(), &one, sizeof(one));
}

void Membership::run() {
  auto next_beat = core::Clock::now();
  epoll_event events[64];
  while (!stopping_.load(std::memory_order_acquire)) {
    const auto until = std::chrono::duration_cast<std::chrono::milliseconds>(next_beat - core::Clock::now()).count();
    const int got = ::epoll_wait(epoll_.get(), events, 64, static_cast<int>(std::clamp<long long>(until, 0, 1000)));
    std::vector<std::tuple<int, bool, std::string>> found;
    {
      core::LockGuard lock(mutex_);
      for (int i = 0; i < got; ++i) {
        const int p = static_cast<int>(events[i].data.u32);
        if (p == size_ + static_cast<int>(kWakeId)) {
          std::uint64_t count;
          [[maybe_unused]] ssize_t drained = ::read(wake_fd_.get(), &count, sizeof(count));
          continue;
        }
        if (p >= size_) continue;  // a handshake: progressed below
        if (!peers_[static_cast<std::size_t>(p)].open) continue;
        if ((events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) != 0) handle_readable(p);
        if ((events[i].events & EPOLLOUT) != 0 && peers_[static_cast<std::size_t>(p)].open) flush(p);
      }
      progress_handshakes();
      if (start_asked_ >= epoch_ && !agreement_.excluded()) {
        if (!agreement_.decided()) {
          agreement_.start();
        } else if (start_asked_ > epoch_) {
          begin_epoch();
        }
      }
      const auto now = core::Clock::now();
      if (now >= next_beat) {
        next_beat = now + heartbeat_;
        for (int p = 0; p < size_; ++p) {
          Peer& peer = peers_[static_cast<std::size_t>(p)];
          if (!peer.open && peer.connecting_since != core::Clock::time_point{} && timeout_.count() >= 0 &&
              now - peer.connecting_since > timeout_) {
            lose(p, true,
                 "no control connection to it could be made in " +
                     seconds_text(std::chrono::duration_cast<std::chrono::milliseconds>(now - peer.connecting_since)) +
                     " (an agreement needed one): the process is stopped, hung or cut off");
            continue;
          }
          if (!peer.open) continue;
          if (timeout_.count() >= 0 && now - peer.heard > timeout_) {
            lose(p, true,
                 "it sent nothing on its control connection for " +
                     seconds_text(std::chrono::duration_cast<std::chrono::milliseconds>(now - peer.heard)) +
                     " (a heartbeat is due every " + std::to_string(heartbeat_.count()) +
                     " ms): the process is stopped, hung or cut off");
            continue;
          }
          if (peer.out.size() == peer.out_start) queue_frame(p, FrameKind::Beat, 0, {});
        }
      }
      sync_suspects();
      send_agreement();
      drive_gatherings();
      for (int p = 0; p < size_; ++p) {
        if (peers_[static_cast<std::size_t>(p)].open) flush(p);
      }
      // After the flush: the decision is on its way to the others before
      // this rank's application acts on it.
      note_decision();
      found.swap(found_);
    }
    if (!found.empty()) {
      core::LockGuard lock(handlers_mutex_);
      for (auto& [peer, timed_out, why] : found) {
        losses_.push_back({peer, timed_out, why});
        for (auto& entry : handlers_) entry.second(peer, timed_out, why);
      }
    }
    tell_gather_failures();
  }
}

void Membership::handle_readable(int p) {
  Peer& peer = peers_[static_cast<std::size_t>(p)];
  std::uint8_t buffer[4096];
  for (int reads = 0; reads < 64 && peer.open; ++reads) {
    const ssize_t got = ::recv(mesh_.fd(p), buffer, sizeof(buffer), 0);
    if (got > 0) {
      peer.reader.feed(buffer, static_cast<std::size_t>(got));
      Frame frame;
      std::string why;
      for (;;) {
        const auto status = peer.reader.next(frame, why);
        if (status == FrameReader::Status::NeedMore) break;
        if (status == FrameReader::Status::Malformed) {
          lose(p, false, "it sent " + why + " on its control connection");
          return;
        }
        handle_frame(p, frame);
        if (!peer.open) return;
      }
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (got == 0 || errno == ECONNRESET) {
      // A killed process's kernel closes its sockets: a reset when bytes it
      // never read were waiting.
      lose(p, false, "its control connection closed without a goodbye: the process died or was killed");
    } else {
      lose(p, false, std::string("its control connection failed: ") + std::strerror(errno));
    }
    return;
  }
}

void Membership::handle_frame(int p, const Frame& frame) {
  Peer& peer = peers_[static_cast<std::size_t>(p)];
  peer.heard = core::Clock::now();
  switch (frame.kind) {
    case FrameKind::Beat: return;
    case FrameKind::Gather: take_gather_frame(p, frame); return;
    case FrameKind::Bye:
      peer.left = true;
      close_peer(p);
      reasons_[static_cast<std::size_t>(p)] = "it closed its communicator";
      agreement_.depart(p);
      return;
    case FrameKind::Propose:
    case FrameKind::Decide: {
      const std::uint32_t epoch = frame.payload.size() < 4 ? 0 : core::get_le32(frame.payload.data());
      auto set = frame.payload.size() < 4 ? std::nullopt : RankSet::decode(size_, std::span(frame.payload).subspan(4));
      if (!set) {
        lose(p, false, "it sent a malformed set of ranks on its control connection");
        return;
      }
      // A peer starts the next agreement only after deciding this one, and
      // its decision came first on the connection: so it is decided here too.
      if (epoch == epoch_ + 1 && agreement_.decided()) {
        note_decision();
        begin_epoch();
      }
      if (epoch != epoch_) return;
      AgreementMessage message;
      message.kind =
          frame.kind == FrameKind::Propose ? AgreementMessage::Kind::Propose : AgreementMessage::Kind::Decide;
      message.round = frame.round;
      message.set = std::move(*set);
      agreement_.receive(p, message);
      return;
    }
  }
}

void Membership::lose(int p, bool timed_out, const std::string& why) {
  Peer& peer = peers_[static_cast<std::size_t>(p)];
  if (peer.lost || peer.left) return;
  peer.lost = true;
  reasons_[static_cast<std::size_t>(p)] = why;
  close_peer(p);
  if (agreement_.decided() && !agreement_.decision().contains(p)) {
    // A failure after the last decision: the next agreement is about it.
    note_decision();
    begin_epoch();
  } else {
    agreement_.suspect(p);
  }
  RDMX_INFO("membership: rank %d suspects rank %d: %s", rank_, p, why.c_str());
  found_.emplace_back(p, timed_out, why);
}

void Membership::sync_suspects() {
  for (int r : agreement_.suspects().members()) {
    Peer& peer = peers_[static_cast<std::size_t>(r)];
    if (peer.lost || peer.left) continue;
    const int by = agreement_.reported_by(r);
    lose(r, false,
         by >= 0 && by != rank_ ? "rank " + std::to_string(by) + " reports that it failed"
                                : "the survivors agreed that it failed");
  }
}

void Membership::note_decision() {
  if (agreement_.decided() && decisions_.size() < epoch_) {
    decisions_.push_back(agreement_.decision());
    decided_word_.notify_all();
  } else if (agreement_.excluded()) {
    decided_word_.notify_all();
  }
}

void Membership::begin_epoch() {
  // What this agreement still has to send (its decision, passed on) goes
  // out under its own number before the next one replaces it.
  send_agreement();
  const RankSet before = agreement_.decision();
  ++epoch_;
  agreement_ = Agreement(rank_, size_, before);
  for (int p = 0; p < size_; ++p) {
    const Peer& peer = peers_[static_cast<std::size_t>(p)];
    if (p == rank_ || before.contains(p)) continue;
    if (peer.left) {
      agreement_.depart(p);
    } else if (peer.lost) {
      agreement_.suspect(p);
    }
  }
  agreement_.start();
}

void Membership::send_agreement() {
  for (const auto& out : agreement_.take_outgoing()) {
    const Peer& peer = peers_[static_cast<std::size_t>(out.to)];
    if (peer.lost || peer.left) continue;
    std::vector<std::uint8_t> bytes;
    core::append_le32(bytes, epoch_);
    const auto set = out.message.set.encode();
    bytes.insert(bytes.end(), set.begin(), set.end());
    queue_frame(out.to, out.message.kind == AgreementMessage::Kind::Propose ? FrameKind::Propose : FrameKind::Decide,
                out.message.round, bytes);
  }
}

void Membership::queue_frame(int p, FrameKind kind, std::uint32_t round, std::span<const std::uint8_t> payload) {
  Peer& peer = peers_[static_cast<std::size_t>(p)];
  if (peer.lost || peer.left || p == rank_) return;
  const auto frame = encode_frame(kind, round, payload);
  peer.out.insert(peer.out.end(), frame.begin(), frame.end());
  if (!peer.open) connect(p);
}

void Membership::connect(int p) {
  Peer& peer = peers_[static_cast<std::size_t>(p)];
  if (peer.connecting_since != core::Clock::time_point{}) return;
  peer.connecting_since = core::Clock::now();
  ControlHandshakes& handshakes = mesh_.handshakes();
  if (handshakes.dialing(p)) return;
  const std::string problem = handshakes.dial(p, mesh_.address(p));
  watch_handshakes();
  if (!problem.empty()) lose(p, false, "no control connection to it could be made: " + problem);
}

void Membership::open_peer(int p) {
  Peer& peer = peers_[static_cast<std::size_t>(p)];
  peer.open = true;
  peer.heard = core::Clock::now();
  peer.connecting_since = {};
  peer.watching_out = false;
  epoll_event event{};
  event.events = EPOLLIN | EPOLLRDHUP;
  event.data.u32 = static_cast<std::uint32_t>(p);
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, mesh_.fd(p), &event);
}

// The handshakes' sockets come and go, and a closed one's number may come
// back as another: each is added again (EEXIST is harmless) and each gone
// is removed before a finished one joins the peers under its own id.
void Membership::watch_handshakes() {
  const std::vector<int> now = mesh_.handshakes().fds();
  for (int fd : watched_) {
    if (std::find(now.begin(), now.end(), fd) == now.end()) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  }
  for (int fd : now) {
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u32 = static_cast<std::uint32_t>(size_) + kHandshakeId;
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &event);
  }
  watched_ = now;
}

void Membership::progress_handshakes() {
  const ControlHandshakes::Admit admit = [this](int from, std::string& why) RDMX_NO_THREAD_SAFETY_ANALYSIS {
    const Peer& peer = peers_[static_cast<std::size_t>(from)];
    if (peer.lost || peer.left) {
      why = "rank " + std::to_string(from) + (peer.left ? " closed its communicator" : " is counted failed");
      return ControlHandshakes::Admission::Refuse;
    }
    return mesh_.admit(from, why);
  };
  auto outcomes = mesh_.handshakes().progress(admit);
  watch_handshakes();
  for (ControlHandshakes::Outcome& o : outcomes) {
    Peer& peer = peers_[static_cast<std::size_t>(o.peer)];
    if (o.fd) {
      if (peer.open || peer.lost || peer.left) continue;
      mesh_.adopt(o.peer, std::move(o.fd));
      open_peer(o.peer);
      flush(o.peer);
    } else if (!o.problem.empty()) {
      lose(o.peer, false, "no control connection to it could be made: " + o.problem);
    }
  }
}

void Membership::flush(int p) {
  Peer& peer = peers_[static_cast<std::size_t>(p)];
  while (peer.open && peer.out_start < peer.out.size()) {
    const ssize_t sent = ::send(mesh_.fd(p), peer.out.data() + peer.out_start, peer.out.size() - peer.out_start,
                                MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent > 0) {
      peer.out_start += static_cast<std::size_t>(sent);
      continue;
    }
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    lose(p, false,
         errno == ECONNRESET || errno == EPIPE
             ? "its control connection closed without a goodbye: the process died or was killed"
             : std::string("its control connection failed: ") + std::strerror(errno));
    return;
  }
  if (!peer.open) return;
  if (peer.out_start == peer.out.size()) {
    peer.out.clear();
    peer.out_start = 0;
  } else if (peer.out.size() - peer.out_start > kMaxQueuedBytes) {
    lose(p, true, "it has not read its control connection for a long time: the process is stopped or hung");
    return;
  }
  const bool want_out = !peer.out.empty();
  if (want_out != peer.watching_out) {
    epoll_event event{};
    event.events = EPOLLIN | EPOLLRDHUP | (want_out ? EPOLLOUT : 0u);
    event.data.u32 = static_cast<std::uint32_t>(p);
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, mesh_.fd(p), &event);
    peer.watching_out = want_out;
  }
}

void Membership::close_peer(int p) {
  Peer& peer = peers_[static_cast<std::size_t>(p)];
  if (peer.connecting_since != core::Clock::time_point{}) {
    peer.connecting_since = {};
    mesh_.handshakes().cancel(p);
    watch_handshakes();
  }
  if (!peer.open) return;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, mesh_.fd(p), nullptr);
  mesh_.close(p);
  peer.open = false;
  peer.out.clear();
  peer.out_start = 0;
}

Verdict Membership::agree(std::uint32_t epoch, core::Clock::time_point deadline) {
  if (epoch < 1) {
    throw Error(ErrorCode::InvalidArgument, "agreements are numbered from 1",
                ErrorContext{.op = "agree", .rank = rank_});
  }
  {
    core::LockGuard lock(mutex_);
    start_asked_ = std::max(start_asked_, epoch);
  }
  wake();
  const auto settled = [this, epoch] {
    core::LockGuard lock(mutex_);
    return decisions_.size() >= epoch || agreement_.excluded();
  };
  const core::WaitResult result = core::wait_until(settled, &decided_word_, deadline);
  Verdict verdict;
  RankSet before(size_);
  {
    core::LockGuard lock(mutex_);
    if (agreement_.excluded()) {
      const int by = agreement_.excluded_by();
      verdict.outcome = Verdict::Outcome::Excluded;
      verdict.failed = RankSet(size_);
      verdict.failed.insert(rank_);
      verdict.why = "rank " + std::to_string(by) +
                    " counts this rank failed (it was stopped, too slow or cut off), and the others go on without it";
      return verdict;
    }
    if (result != core::WaitResult::Ready) {
      std::string awaited;
      for (int r : agreement_.awaiting()) awaited += (awaited.empty() ? "" : ", ") + std::to_string(r);
      throw Error(result == core::WaitResult::Aborted ? ErrorCode::InvalidState : ErrorCode::Timeout,
                  "the agreement on which ranks failed did not finish: agreement " + std::to_string(epoch_) +
                      ", round " + std::to_string(agreement_.round()) + " still waits for ranks " +
                      (awaited.empty() ? "none" : awaited) + "; suspected so far: " + agreement_.suspects().to_string(),
                  ErrorContext{.op = "agree on failed ranks",
                               .rank = rank_,
                               .hint = "a rank that is neither dead nor answering is suspected at the timeout "
                                       "(RDMX_TIMEOUT); retry, or abort the job"});
    }
    verdict.failed = decisions_[epoch - 1];
    if (epoch > 1) before = decisions_[epoch - 2];
    verdict.survivors = verdict.failed.complement();
    for (int r : verdict.failed.members()) {
      if (before.contains(r)) continue;
      const std::string& why = reasons_[static_cast<std::size_t>(r)];
      verdict.why += (verdict.why.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + ": " +
                     (why.empty() ? "the survivors agreed that it failed" : why);
    }
  }
  return settle_quorum(std::move(verdict), before, epoch);
}

Verdict Membership::settle_quorum(Verdict verdict, const RankSet& before, std::uint32_t epoch) {
  const int live = static_cast<int>(verdict.survivors.size());
  const std::string count = std::to_string(live) + " of " + std::to_string(before.size() - before.count()) + " ranks";
  switch (quorum_of(verdict.failed, before)) {
    case Quorum::Majority: return verdict;
    case Quorum::Minority:
      verdict.outcome = Verdict::Outcome::Minority;
      verdict.why = "only " + count + " can still reach each other (failed or unreachable: " + verdict.why +
                    "); the others may be alive on the other side of a cut, so this side does not go on: a group "
                    "goes on only with more than half of its ranks";
      return verdict;
    case Quorum::Tie: break;
  }
  // The decision's own bitmap: equal bytes are an equal decision.
  const Bytes mine = verdict.failed.encode();
  try {
    if (store_->compare_set(tag_ + "/tie/" + std::to_string(epoch), {}, mine) == mine) return verdict;
    verdict.outcome = Verdict::Outcome::TieLost;
    verdict.why = count +
                  " remain, exactly half, and the other half wrote its decision to the store first, so "
                  "that half goes on and this one does not (" +
                  verdict.why + ")";
  } catch (const Error& e) {
    verdict.outcome = Verdict::Outcome::TieUnresolved;
    verdict.why = count + " remain, exactly half, and the store that breaks such ties cannot be reached (" +
                  e.message() + "), so neither half goes on (" + verdict.why +
                  "); run the store apart from the ranks (rdmx_store, a file store or torchrun's agent)";
  }
  return verdict;
}

}  // namespace rdmx::membership
