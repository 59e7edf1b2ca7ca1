// SPDX-License-Identifier: MIT
// The RDMX_PROFILE recorder (include/rdmx/profile.hpp): one per process,
// shared by its communicators and the torch backend. A step's line is
// written when the step ends, so a job that dies keeps the steps it ran.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rdmx/profile.hpp"
#include "services/log.hpp"
#include "services/settings.hpp"

namespace rdmx::profile {
namespace {

constexpr core::TextSetting kProfile{
    "RDMX_PROFILE", "unset",
    "write each training step's collectives (issue, wait and completion times) to this file for rdmx plan; %r in "
    "the name becomes the rank, else rank 0 alone writes (docs/ADVISOR.md)"};
RDMX_SETTING(kProfile);

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point origin, Clock::time_point t) {
  return std::chrono::duration<double>(t - origin).count();
}

class Recorder {
 public:
  Recorder() : path_(kProfile.read().value_or("")) {}
  ~Recorder() {
    std::lock_guard<std::mutex> lock(mutex_);
    // The step under way when the process ends: kept, marked partial.
    if (!current_.empty()) write_step(last_activity_, true);
    if (out_ != nullptr) std::fclose(out_);
  }

  bool enabled() const noexcept { return !path_.empty(); }

  std::uint64_t issued(int rank, int ranks, CollOp op, std::size_t bytes, DataType type) {
    const auto now = Clock::now();
    std::lock_guard<std::mutex> lock(mutex_);
    if (!decided_) decide(rank, ranks);
    if (out_ == nullptr) return 0;
    if (!explicit_steps_) find_step_end(op, bytes, ranks);
    if (current_.empty() && steps_ == 0 && !started_) {
      step_start_ = now;
      started_ = true;
    }
    Entry e;
    e.quiescent = all_done();
    e.id = next_id_++;
    e.op = op;
    e.bytes = bytes;
    e.type = type;
    e.ranks = ranks;
    e.issue = now;
    current_.push_back(e);
    last_activity_ = now;
    return e.id;
  }

  void waited(std::uint64_t id) {
    const auto now = Clock::now();
    std::lock_guard<std::mutex> lock(mutex_);
    if (Entry* e = find(id); e != nullptr && !e->wait_set) {
      e->wait = now;
      e->wait_set = true;
    }
  }

  void completed(std::uint64_t id) {
    const auto now = Clock::now();
    std::lock_guard<std::mutex> lock(mutex_);
    if (Entry* e = find(id); e != nullptr && !e->done_set) {
      e->done = now;
      e->done_set = true;
      last_activity_ = std::max(last_activity_, now);
    }
  }

  void step() {
    const auto now = Clock::now();
    std::lock_guard<std::mutex> lock(mutex_);
    explicit_steps_ = true;
    if (out_ == nullptr) {
      // Before any collective: the first step starts here.
      step_start_ = now;
      started_ = true;
      return;
    }
    write_step(now, false);
    step_start_ = now;
  }

  void describe(double samples, double parameters) {
    std::lock_guard<std::mutex> lock(mutex_);
    samples_ = samples;
    parameters_ = parameters;
  }

 private:
  struct Entry {
    std::uint64_t id = 0;
    CollOp op = CollOp::Barrier;
    std::size_t bytes = 0;
    DataType type = DataType::Uint8;
    int ranks = 0;
    Clock::time_point issue, wait, done;
    bool wait_set = false, done_set = false;
    bool quiescent = false;  // everything before it had completed when it was issued
    bool same(CollOp o, std::size_t b, int r) const { return op == o && bytes == b && ranks == r; }
  };

  bool all_done() const {
    for (const Entry& e : current_) {
      if (!e.done_set) return false;
    }
    return true;
  }

  // Where the current entries' step ends: their last completion or wait.
  Clock::time_point boundary() const {
    Clock::time_point b = step_start_;
    for (const Entry& e : current_) {
      if (e.done_set) b = std::max(b, e.done);
      if (e.wait_set) b = std::max(b, e.wait);
    }
    return b;
  }

  void close_step() {
    const Clock::time_point end = boundary();
    write_step(end, false);
    step_start_ = end;
  }

  // Without marks: a step ends where its anchor comes round again, with
  // everything before completed. Anchors are collectives nobody waited for
  // at once that started on a quiet link (DDP's first bucket of a step),
  // else the step's first collective (programs of blocking calls). When the
  // anchor is not the first entry (DDP's first iteration, with its
  // broadcasts and buckets not yet rebuilt), what precedes it is a step too.
  void find_step_end(CollOp op, std::size_t bytes, int ranks) {
    if (current_.empty() || !all_done()) return;
    std::size_t at = current_.size();
    for (std::size_t i = 0; i < current_.size(); ++i) {
      const Entry& e = current_[i];
      if (e.quiescent && !e.wait_set && e.same(op, bytes, ranks)) {
        at = i;
        break;
      }
    }
    if (at == current_.size() && current_.front().same(op, bytes, ranks)) at = 0;
    if (at == current_.size()) return;
    if (at > 0) {
      std::vector<Entry> rest(current_.begin() + static_cast<std::ptrdiff_t>(at), current_.end());
      current_.resize(at);
      close_step();
      current_ = std::move(rest);
    }
    close_step();
  }

  Entry* find(std::uint64_t id) {
    if (id == 0) return nullptr;
    for (auto it = current_.rbegin(); it != current_.rend(); ++it) {
      if (it->id == id) return &*it;
    }
    return nullptr;
  }

  // The first collective seen names the writer: with %r in the path every
  // rank writes its own file, else rank 0 of that communicator alone.
  void decide(int rank, int ranks) {
    decided_ = true;
    rank_ = rank;
    ranks_ = ranks;
    std::string path = path_;
    const auto at = path.find("%r");
    if (at != std::string::npos) {
      path.replace(at, 2, std::to_string(rank));
    } else if (rank != 0) {
      return;
    }
    out_ = std::fopen(path.c_str(), "w");
    if (out_ == nullptr) {
      RDMX_WARN("RDMX_PROFILE: cannot open '%s' for writing; no profile is recorded (rank %d)", path.c_str(), rank);
    }
  }

  void write_header() {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    const nlohmann::json h = {{"rdmx_profile", 1},        {"rank", rank_},
                              {"ranks", ranks_},          {"host", host},
                              {"pid", ::getpid()},        {"samples_per_step", samples_},
                              {"parameters", parameters_}};
    std::fputs((h.dump() + "\n").c_str(), out_);
    header_written_ = true;
  }

  // Writes the step that ends at `end` with the collectives completed by
  // then; the others (still running) go on into the next step.
  void write_step(Clock::time_point end, bool partial) {
    if (out_ == nullptr) return;
    if (!header_written_) write_header();
    nlohmann::json colls = nlohmann::json::array();
    std::vector<Entry> carried;
    double exposed = 0;
    for (const Entry& e : current_) {
      if (!e.done_set && !partial) {
        carried.push_back(e);
        continue;
      }
      nlohmann::json c = {{"op", to_string(e.op)},
                          {"bytes", e.bytes},
                          {"type", to_string(e.type)},
                          {"ranks", e.ranks},
                          {"issue_us", seconds_since(step_start_, e.issue) * 1e6},
                          {"wait_us", nullptr},
                          {"done_us", nullptr}};
      if (e.done_set) c["done_us"] = seconds_since(step_start_, e.done) * 1e6;
      if (e.wait_set) {
        c["wait_us"] = seconds_since(step_start_, e.wait) * 1e6;
        if (e.done_set && e.done > e.wait) exposed += seconds_since(e.wait, e.done);
      }
      colls.push_back(std::move(c));
    }
    const double duration = std::max(0.0, seconds_since(step_start_, end));
    nlohmann::json line = {{"step", steps_++},
                           {"duration_us", duration * 1e6},
                           {"exposed_us", exposed * 1e6},
                           {"compute_us", std::max(0.0, duration - exposed) * 1e6},
                           {"marked", explicit_steps_},
                           {"collectives", std::move(colls)}};
    if (partial) line["partial"] = true;
    std::fputs((line.dump() + "\n").c_str(), out_);
    std::fflush(out_);
    current_.swap(carried);
  }

  const std::string path_;
  std::mutex mutex_;
  bool decided_ = false, started_ = false, explicit_steps_ = false, header_written_ = false;
  int rank_ = -1, ranks_ = 0;
  double samples_ = 1, parameters_ = 0;
  std::FILE* out_ = nullptr;
  Clock::time_point step_start_{}, last_activity_{};
  std::vector<Entry> current_;
  std::uint64_t next_id_ = 1;
  int steps_ = 0;
};

Recorder& recorder() {
  static Recorder r;
  return r;
}

}  // namespace

bool enabled() noexcept { return recorder().enabled(); }

std::size_t counted_bytes(CollOp op, std::size_t count, DataType type, int ranks) noexcept {
  const std::size_t bytes = count * size_of(type);
  switch (op) {
    case CollOp::AllGather:
    case CollOp::ReduceScatter:
    case CollOp::AllToAll:
    case CollOp::Gather:
    case CollOp::Scatter: return bytes * static_cast<std::size_t>(ranks);
    default: return bytes;
  }
}

void step() {
  if (enabled()) recorder().step();
}

void describe(double samples_per_step, double parameters) {
  if (enabled()) recorder().describe(samples_per_step, parameters);
}

std::uint64_t issued(int rank, int ranks, CollOp op, std::size_t bytes, DataType type) {
  return enabled() ? recorder().issued(rank, ranks, op, bytes, type) : 0;
}

void waited(std::uint64_t id) {
  if (id != 0) recorder().waited(id);
}

void completed(std::uint64_t id) {
  if (id != 0) recorder().completed(id);
}

}  // namespace rdmx::profile
