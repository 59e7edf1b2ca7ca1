// SPDX-License-Identifier: MIT
#include "cuda_sim/sim_streams.hpp"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

namespace rdmx::cuda_sim {
namespace {

constexpr CUresult kSuccess = 0;
constexpr CUresult kInvalidValue = 1;
constexpr CUresult kInvalidHandle = 400;  // a stream of another process (a forked child's parent's)
constexpr CUresult kNotReady = 600;
constexpr CUresult kLaunchTimeout = 702;
// A wait on memory that nobody ever writes would hang the stream for good
// on a GPU; here it gives up, so that a test that forgot to release it
// fails instead of hanging.
constexpr std::chrono::seconds kWaitLimit{120};
// A host call blocked this long on a stream is taken for a deadlock.
constexpr std::chrono::seconds kHostWaitLimit{20};

unsigned delay_us() {
  static const unsigned value = [] {
    const char* text = std::getenv("RDMX_SIM_CUDA_DELAY_US");
    return text == nullptr ? 0u : static_cast<unsigned>(std::strtoul(text, nullptr, 10));
  }();
  return value;
}

struct Stream;

struct Item {
  StreamWork work;
  std::string what;
  // Earlier work of other streams this waits for (the legacy stream's implicit ordering).
  std::vector<std::pair<std::shared_ptr<Stream>, std::uint64_t>> after;
};

struct Stream {
  const bool blocking;
  const bool legacy;
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<Item> queue;
  std::uint64_t enqueued = 0;   // positions handed out
  std::uint64_t completed = 0;  // positions whose work has run
  std::string running;          // what the worker is doing, for diagnostics
  bool stopping = false;
  CUresult error = kSuccess;
  std::thread worker;

  Stream(bool is_blocking, bool is_legacy) : blocking(is_blocking), legacy(is_legacy), worker([this] { run(); }) {}
  ~Stream() {
    {
      std::lock_guard lock(mutex);
      stopping = true;
    }
    changed.notify_all();
    worker.join();
  }
  void run();
  // Waits (on a worker or the host) until this stream has completed `position`.
  bool reached(std::uint64_t position, std::chrono::steady_clock::time_point give_up) {
    std::unique_lock lock(mutex);
    return changed.wait_until(lock, give_up, [&] { return completed >= position; });
  }
};

void Stream::run() {
  thread_local std::minstd_rand random{std::random_device{}()};
  std::unique_lock lock(mutex);
  for (;;) {
    changed.wait(lock, [&] { return stopping || !queue.empty(); });
    if (queue.empty()) return;
    Item item = std::move(queue.front());
    queue.pop_front();
    running = item.what;
    lock.unlock();
    for (auto& [other, position] : item.after) {
      other->reached(position, std::chrono::steady_clock::time_point::max());
    }
    if (const unsigned most = delay_us(); most > 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(random() % (most + 1)));
    }
    const CUresult result = item.work();
    item.after.clear();
    lock.lock();
    running.clear();
    ++completed;
    if (result != kSuccess && error == kSuccess) error = result;
    changed.notify_all();
  }
}

// Every stream of the process, and the legacy stream, made on first use.
// A forked child starts with none: the parent's worker threads are not in it.
struct Streams {
  std::mutex mutex;
  std::map<Stream*, std::shared_ptr<Stream>> all;
  std::shared_ptr<Stream> legacy;
};
Streams* streams_ = nullptr;

Streams& streams() {
  static std::once_flag once;
  std::call_once(once, [] {
    streams_ = new Streams;  // never freed: worker threads may still use it at exit
    ::pthread_atfork(nullptr, nullptr, [] { streams_ = new Streams; });
  });
  return *streams_;
}

std::shared_ptr<Stream> legacy_locked(Streams& s) {
  if (!s.legacy) {
    s.legacy = std::make_shared<Stream>(true, true);
    s.all[s.legacy.get()] = s.legacy;
  }
  return s.legacy;
}

std::shared_ptr<Stream> resolve(CUstream stream) {
  Streams& s = streams();
  std::lock_guard lock(s.mutex);
  if (stream == nullptr) return legacy_locked(s);
  auto it = s.all.find(reinterpret_cast<Stream*>(stream));
  return it == s.all.end() ? nullptr : it->second;
}

void wait_or_abort(Stream& stream, std::uint64_t position, const char* call) {
  if (stream.reached(position, std::chrono::steady_clock::now() + kHostWaitLimit)) return;
  std::string held;
  {
    std::lock_guard lock(stream.mutex);
    held = stream.running.empty() ? "nothing it says" : stream.running;
  }
  std::fprintf(stderr,
               "simulated CUDA driver: %s waited %lld s for %s, which is held by %s (a real driver would wait for "
               "good): aborting\n",
               call, static_cast<long long>(kHostWaitLimit.count()),
               stream.legacy ? "the legacy default stream" : "a stream", held.c_str());
  std::abort();
}

struct Event {
  std::mutex mutex;
  std::condition_variable changed;
  std::uint64_t recorded = 0;  // records made
  std::uint64_t reached = 0;   // records whose stream got there
};

Event* as_event(CUevent event) { return reinterpret_cast<Event*>(event); }

}  // namespace

CUstream create_stream(bool blocking) {
  auto stream = std::make_shared<Stream>(blocking, false);
  Streams& s = streams();
  std::lock_guard lock(s.mutex);
  s.all[stream.get()] = stream;
  return reinterpret_cast<CUstream>(stream.get());
}

void destroy_stream(CUstream stream) {
  std::shared_ptr<Stream> owned;
  {
    Streams& s = streams();
    std::lock_guard lock(s.mutex);
    auto it = s.all.find(reinterpret_cast<Stream*>(stream));
    if (it == s.all.end() || it->second->legacy) return;
    owned = std::move(it->second);
    s.all.erase(it);
  }
  std::uint64_t last = 0;
  {
    std::lock_guard lock(owned->mutex);
    last = owned->enqueued;
  }
  wait_or_abort(*owned, last, "cuStreamDestroy");
}

std::uint64_t enqueue(CUstream stream, StreamWork work, std::string what) {
  Streams& s = streams();
  // One lock over the snapshot and the queueing, so that two streams never
  // wait for each other's later work.
  std::lock_guard order(s.mutex);
  std::shared_ptr<Stream> target = stream == nullptr ? legacy_locked(s) : nullptr;
  if (!target) {
    auto it = s.all.find(reinterpret_cast<Stream*>(stream));
    if (it == s.all.end()) return 0;
    target = it->second;
  }
  Item item{std::move(work), std::move(what), {}};
  if (target->blocking) {
    for (auto& [raw, other] : s.all) {
      if (other == target || !other->blocking || (!target->legacy && !other->legacy)) continue;
      std::lock_guard lock(other->mutex);
      if (other->enqueued > other->completed) item.after.emplace_back(other, other->enqueued);
    }
  }
  std::uint64_t position = 0;
  {
    std::lock_guard lock(target->mutex);
    target->queue.push_back(std::move(item));
    position = ++target->enqueued;
  }
  target->changed.notify_all();
  return position;
}

void wait_for(CUstream stream, std::uint64_t position, const char* call) {
  if (auto s = resolve(stream)) wait_or_abort(*s, position, call);
}

void drain(CUstream stream, const char* call) {
  std::shared_ptr<Stream> s = resolve(stream);
  if (!s) return;
  std::uint64_t last = 0;
  {
    std::lock_guard lock(s->mutex);
    last = s->enqueued;
  }
  wait_or_abort(*s, last, call);
}

CUresult synchronize(CUstream stream, const char* call) {
  std::shared_ptr<Stream> s = resolve(stream);
  if (!s) return kInvalidHandle;
  drain(stream, call);
  std::lock_guard lock(s->mutex);
  return std::exchange(s->error, kSuccess);
}

CUresult synchronize_all(const char* call) {
  std::vector<std::pair<std::shared_ptr<Stream>, std::uint64_t>> targets;
  {
    Streams& s = streams();
    std::lock_guard lock(s.mutex);
    for (auto& [raw, stream] : s.all) {
      std::lock_guard inner(stream->mutex);
      targets.emplace_back(stream, stream->enqueued);
    }
  }
  CUresult first = kSuccess;
  for (auto& [stream, last] : targets) {
    wait_or_abort(*stream, last, call);
    std::lock_guard lock(stream->mutex);
    if (first == kSuccess) first = std::exchange(stream->error, kSuccess);
  }
  return first;
}

CUevent create_event() { return reinterpret_cast<CUevent>(new Event); }
void destroy_event(CUevent event) { delete as_event(event); }

CUresult record(CUevent event, CUstream stream) {
  Event* e = as_event(event);
  std::uint64_t target = 0;
  {
    std::lock_guard lock(e->mutex);
    target = ++e->recorded;
  }
  const std::uint64_t queued = enqueue(
      stream,
      [e, target] {
        {
          std::lock_guard lock(e->mutex);
          e->reached = std::max(e->reached, target);
        }
        e->changed.notify_all();
        return kSuccess;
      },
      "cuEventRecord");
  return queued != 0 ? kSuccess : kInvalidHandle;
}

CUresult query(CUevent event) {
  Event* e = as_event(event);
  std::lock_guard lock(e->mutex);
  return e->reached >= e->recorded ? kSuccess : kNotReady;
}

CUresult synchronize_event(CUevent event) {
  Event* e = as_event(event);
  std::unique_lock lock(e->mutex);
  const std::uint64_t target = e->recorded;
  if (!e->changed.wait_for(lock, kHostWaitLimit, [&] { return e->reached >= target; })) {
    std::fprintf(stderr,
                 "simulated CUDA driver: cuEventSynchronize waited %lld s for an event its stream never reached (a "
                 "real driver would wait for good): aborting\n",
                 static_cast<long long>(kHostWaitLimit.count()));
    std::abort();
  }
  return kSuccess;
}

CUresult wait_event(CUstream stream, CUevent event) {
  Event* e = as_event(event);
  std::uint64_t target = 0;
  {
    std::lock_guard lock(e->mutex);
    target = e->recorded;
  }
  const std::uint64_t queued = enqueue(
      stream,
      [e, target] {
        std::unique_lock lock(e->mutex);
        e->changed.wait(lock, [&] { return e->reached >= target; });
        return kSuccess;
      },
      "cuStreamWaitEvent");
  return queued != 0 ? kSuccess : kInvalidHandle;
}

CUresult wait_value(CUstream stream, const std::uint32_t* address, std::uint32_t value, unsigned flags) {
  // CU_STREAM_WAIT_VALUE_GEQ, EQ, AND, NOR; the FLUSH bit asks for an ordering this stand-in always gives.
  constexpr unsigned kFlush = 1u << 30;
  const unsigned kind = flags & ~kFlush;
  if (kind > 3) return kInvalidValue;
  static const char* const kNames[] = {">=", "==", "& nonzero with", "nor nonzero with"};
  char what[112];
  std::snprintf(what, sizeof what, "cuStreamWaitValue32 on %p for %s %u", static_cast<const void*>(address),
                kNames[kind], value);
  const std::uint64_t queued = enqueue(
      stream,
      [address, value, kind] {
        const auto give_up = std::chrono::steady_clock::now() + kWaitLimit;
        // The hardware polls memory; so does this stand-in for it.
        while (std::chrono::steady_clock::now() < give_up) {
          const std::uint32_t now = std::atomic_ref<const std::uint32_t>(*address).load(std::memory_order_acquire);
          const bool met = kind == 0   ? static_cast<std::int32_t>(now - value) >= 0
                           : kind == 1 ? now == value
                           : kind == 2 ? (now & value) != 0
                                       : ~(now | value) != 0;
          if (met) return kSuccess;
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
        return kLaunchTimeout;
      },
      what);
  return queued != 0 ? kSuccess : kInvalidHandle;
}

CUresult write_value(CUstream stream, std::uint32_t* address, std::uint32_t value) {
  const std::uint64_t queued = enqueue(
      stream,
      [address, value] {
        std::atomic_ref<std::uint32_t>(*address).store(value, std::memory_order_release);
        return kSuccess;
      },
      "cuStreamWriteValue32");
  return queued != 0 ? kSuccess : kInvalidHandle;
}

}  // namespace rdmx::cuda_sim
