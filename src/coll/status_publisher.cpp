// SPDX-License-Identifier: MIT
#include "coll/status_publisher.hpp"

#include <unistd.h>

#include <algorithm>

#include "services/log.hpp"
#include "services/settings.hpp"

namespace rdmx::coll {
namespace {

// A few seconds: long before RDMX_TIMEOUT (60 s), and longer than the
// pauses of a healthy job (a checkpoint may take longer: the report is one
// warning, the job goes on).
constexpr core::DurationSetting kStallWarn{
    "RDMX_STALL_WARN", std::chrono::seconds(5), std::chrono::milliseconds(0),
    "a collective that has waited this long logs once which ranks it waits for, their last collectives and where "
    "each one's program is (0: never; RDMX_TIMEOUT's error says the same)"};
RDMX_SETTING(kStallWarn);
constexpr core::DurationSetting kStatusInterval{
    "RDMX_STATUS_INTERVAL", std::chrono::seconds(1), std::chrono::milliseconds(0),
    "how often each rank writes its status (last collectives, progress, where it is) into the job's store for "
    "stall reports and timeouts (0: never)"};
RDMX_SETTING(kStatusInterval);

// A status nobody changed is written again this often, so that readers can
// tell a quiet rank from a process that is gone or stopped.
constexpr int kRewriteEvery = 5;

}  // namespace

std::chrono::milliseconds stall_warning_after() { return kStallWarn.read(); }

StatusPublisher& StatusPublisher::instance() {
  // Never destroyed: a thread may still run at exit.
  static auto* const publisher = new StatusPublisher();
  return *publisher;
}

StatusPublisher::Handle& StatusPublisher::Handle::operator=(Handle&& other) noexcept {
  if (this != &other) {
    if (id_ != 0) instance().remove(id_);
    id_ = other.id_;
    other.id_ = 0;
  }
  return *this;
}

StatusPublisher::Handle::~Handle() {
  if (id_ != 0) instance().remove(id_);
}

StatusPublisher::Handle StatusPublisher::publish(std::shared_ptr<Store> store, RankIdentity who,
                                                 std::shared_ptr<const FlightRecorder> recorder,
                                                 std::chrono::milliseconds timeout,
                                                 std::chrono::milliseconds stall_warn) {
  const auto interval = kStatusInterval.read();
  if (interval.count() == 0 || !store || !recorder) return Handle();
  Source source;
  source.locate_after = (stall_warn.count() > 0 ? std::min(stall_warn, timeout) : timeout) / 2;
  source.store = std::move(store);
  source.key = rank_status_key(who.tag, who.rank);
  source.who = std::move(who);
  source.recorder = std::move(recorder);
  StatusPublisher& self = instance();
  {
    core::LockGuard lock(self.mutex_);
    self.interval_ = interval;
  }
  return self.add(std::move(source));
}

StatusPublisher::Handle StatusPublisher::add(Source source) {
  core::LockGuard lock(mutex_);
  source.id = next_id_++;
  const std::uint64_t id = source.id;
  sources_.push_back(std::move(source));
  if (thread_pid_ != static_cast<long>(::getpid())) {
    // None runs in this process (the first source, or a fork's child).
    thread_pid_ = static_cast<long>(::getpid());
    if (thread_.joinable()) thread_.detach();
    thread_ = std::thread([this] { run(); });
  }
  changed_.notify_all();
  return Handle(id);
}

void StatusPublisher::remove(std::uint64_t id) {
  core::UniqueLock lock(mutex_);
  sources_.erase(std::remove_if(sources_.begin(), sources_.end(), [id](const Source& s) { return s.id == id; }),
                 sources_.end());
  // The thread writes without the lock: wait for a write of this source.
  while (writing_ == id) changed_.wait(lock);
  changed_.notify_all();
}

void StatusPublisher::run() {
  core::UniqueLock lock(mutex_);
  const long me = static_cast<long>(::getpid());
  auto next = std::chrono::steady_clock::now();
  while (thread_pid_ == me) {
    if (sources_.empty()) {
      changed_.wait(lock);
      continue;
    }
    next += interval_;
    const auto now = std::chrono::steady_clock::now();
    if (next < now) next = now;
    changed_.wait_until(lock, next);
    // One source at a time, written without the lock; what it needs is copied.
    std::vector<std::uint64_t> ids;
    for (const Source& s : sources_) ids.push_back(s.id);
    for (std::uint64_t id : ids) {
      auto it = std::find_if(sources_.begin(), sources_.end(), [id](const Source& s) { return s.id == id; });
      if (it == sources_.end()) continue;
      Source copy = *it;
      const auto interval = interval_;
      writing_ = id;
      lock.unlock();
      publish_one(copy, unix_ms_now(), interval);
      lock.lock();
      writing_ = 0;
      it = std::find_if(sources_.begin(), sources_.end(), [id](const Source& s) { return s.id == id; });
      if (it != sources_.end()) {
        it->written_changes = copy.written_changes;
        it->written_ms = copy.written_ms;
        it->wrote_where = copy.wrote_where;
      }
      changed_.notify_all();
    }
  }
}

void StatusPublisher::publish_one(Source& source, std::int64_t now_ms, std::chrono::milliseconds interval) {
  const FlightRecorder::Snapshot snap = source.recorder->snapshot();
  // Where the program is, once it has stayed in one collective or out of
  // rdmx for a while: the waiting ranks report it at the stall warning or
  // the timeout.
  const bool lasting = snap.since_ms != 0 && now_ms - snap.since_ms >= source.locate_after.count();
  const bool changed = snap.changes != source.written_changes;
  const bool stale = now_ms - source.written_ms >= kRewriteEvery * interval.count();
  if (!changed && !stale && !lasting && !source.wrote_where) return;
  core::ProgramLocation where;
  if (lasting) where = core::program_location();
  const nlohmann::json doc = rank_status_document(source.who, snap, lasting ? &where : nullptr, now_ms);
  try {
    source.store->set(source.key, std::string_view(doc.dump()));
    source.written_changes = snap.changes;
    source.written_ms = now_ms;
    source.wrote_where = lasting;
  } catch (const std::exception& e) {
    // The store is gone or refused: the communicator learns so on its own.
    RDMX_TRACE("rank %d: writing its status under %s: %s", source.who.rank, source.key.c_str(), e.what());
  }
}

}  // namespace rdmx::coll
