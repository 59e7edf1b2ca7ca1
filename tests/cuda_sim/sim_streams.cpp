// SPDX-License-Identifier: MIT
#include "cuda_sim/sim_streams.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

namespace rdmx::cuda_sim {
namespace {

constexpr CUresult kSuccess = 0;
constexpr CUresult kInvalidValue = 1;
constexpr CUresult kNotReady = 600;
constexpr CUresult kLaunchTimeout = 702;
// A wait on memory that nobody ever writes would hang the stream for good
// on a GPU; here it gives up, so that a test that forgot to release it
// fails instead of hanging.
constexpr std::chrono::seconds kWaitLimit{120};

struct Stream {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<StreamWork> queue;
  bool running = false;
  bool stopping = false;
  CUresult error = kSuccess;
  std::thread worker;

  Stream() : worker([this] { run(); }) {}
  ~Stream() {
    {
      std::lock_guard lock(mutex);
      stopping = true;
    }
    changed.notify_all();
    worker.join();
  }
  void run() {
    std::unique_lock lock(mutex);
    for (;;) {
      changed.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) return;
      StreamWork work = std::move(queue.front());
      queue.pop_front();
      running = true;
      lock.unlock();
      const CUresult result = work();
      lock.lock();
      running = false;
      if (result != kSuccess && error == kSuccess) error = result;
      changed.notify_all();
    }
  }
};

struct Event {
  std::mutex mutex;
  std::condition_variable changed;
  std::uint64_t recorded = 0;  // records made
  std::uint64_t reached = 0;   // records whose stream got there
};

Stream* as_stream(CUstream stream) { return reinterpret_cast<Stream*>(stream); }
Event* as_event(CUevent event) { return reinterpret_cast<Event*>(event); }

}  // namespace

CUstream create_stream() { return reinterpret_cast<CUstream>(new Stream); }
void destroy_stream(CUstream stream) { delete as_stream(stream); }

CUresult enqueue(CUstream stream, StreamWork work) {
  if (stream == nullptr) return work();
  Stream* s = as_stream(stream);
  {
    std::lock_guard lock(s->mutex);
    s->queue.push_back(std::move(work));
  }
  s->changed.notify_all();
  return kSuccess;
}

CUresult synchronize(CUstream stream) {
  if (stream == nullptr) return kSuccess;
  Stream* s = as_stream(stream);
  std::unique_lock lock(s->mutex);
  s->changed.wait(lock, [&] { return s->queue.empty() && !s->running; });
  return std::exchange(s->error, kSuccess);
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
  return enqueue(stream, [e, target] {
    {
      std::lock_guard lock(e->mutex);
      e->reached = std::max(e->reached, target);
    }
    e->changed.notify_all();
    return kSuccess;
  });
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
  e->changed.wait(lock, [&] { return e->reached >= target; });
  return kSuccess;
}

CUresult wait_event(CUstream stream, CUevent event) {
  Event* e = as_event(event);
  std::uint64_t target = 0;
  {
    std::lock_guard lock(e->mutex);
    target = e->recorded;
  }
  return enqueue(stream, [e, target] {
    std::unique_lock lock(e->mutex);
    e->changed.wait(lock, [&] { return e->reached >= target; });
    return kSuccess;
  });
}

CUresult wait_value(CUstream stream, const std::uint32_t* address, std::uint32_t value, unsigned flags) {
  if (flags > 1) return kInvalidValue;  // GEQ (0) and EQ (1) only
  return enqueue(stream, [address, value, flags] {
    const auto give_up = std::chrono::steady_clock::now() + kWaitLimit;
    // The hardware polls memory; so does this stand-in for it.
    while (std::chrono::steady_clock::now() < give_up) {
      const std::uint32_t now = std::atomic_ref<const std::uint32_t>(*address).load(std::memory_order_acquire);
      if (flags == 0 ? static_cast<std::int32_t>(now - value) >= 0 : now == value) return kSuccess;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return kLaunchTimeout;
  });
}

}  // namespace rdmx::cuda_sim
