// SPDX-License-Identifier: MIT
// The one thread per process that writes each live communicator's rank
// status (rank_status.hpp) into its store every RDMX_STATUS_INTERVAL while
// it changes, and where the program is once the rank has been inside one
// collective, or out of rdmx, for half of RDMX_STALL_WARN or of the
// communicator's timeout. It only reads the flight recorders: the
// collectives never wait for it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "coll/flight_recorder.hpp"
#include "coll/rank_status.hpp"
#include "rdmx/bootstrap.hpp"
#include "services/mutex.hpp"

namespace rdmx::coll {

// RDMX_STALL_WARN: how long a collective waits before it reports once who
// it waits for (0: never).
std::chrono::milliseconds stall_warning_after();

class StatusPublisher {
 public:
  // Publishes `recorder`'s rank into `store` until the returned handle is
  // destroyed; its destruction waits for a write under way, so that the
  // communicator can then remove the key for good. Nothing is published
  // with RDMX_STATUS_INTERVAL=0 (the handle is empty).
  class Handle {
   public:
    Handle() = default;
    Handle(Handle&& other) noexcept : id_(other.id_) { other.id_ = 0; }
    Handle& operator=(Handle&& other) noexcept;
    ~Handle();

   private:
    friend class StatusPublisher;
    explicit Handle(std::uint64_t id) : id_(id) {}
    std::uint64_t id_ = 0;
  };
  // `timeout` and `stall_warn` (stall_warning_after()): the
  // communicator's; where the program is is read once the rank has stayed
  // put for half of the shorter (of the timeout alone without warnings).
  static Handle publish(std::shared_ptr<Store> store, RankIdentity who, std::shared_ptr<const FlightRecorder> recorder,
                        std::chrono::milliseconds timeout, std::chrono::milliseconds stall_warn);

 private:
  struct Source {
    std::uint64_t id = 0;
    std::shared_ptr<Store> store;
    RankIdentity who;
    std::string key;
    std::shared_ptr<const FlightRecorder> recorder;
    std::chrono::milliseconds locate_after{0};  // see publish()
    std::uint64_t written_changes = ~std::uint64_t{0};
    std::int64_t written_ms = 0;
    bool wrote_where = false;
  };

  static StatusPublisher& instance();
  Handle add(Source source);
  void remove(std::uint64_t id);
  void run();
  static void publish_one(Source& source, std::int64_t now_ms, std::chrono::milliseconds interval);

  core::Mutex mutex_;
  std::condition_variable_any changed_;
  std::vector<Source> sources_ RDMX_GUARDED_BY(mutex_);
  std::uint64_t next_id_ RDMX_GUARDED_BY(mutex_) = 1;
  std::uint64_t writing_ RDMX_GUARDED_BY(mutex_) = 0;  // the source being written now, or 0
  long thread_pid_ RDMX_GUARDED_BY(mutex_) = 0;        // the process whose thread runs (a fork's child has none)
  std::thread thread_ RDMX_GUARDED_BY(mutex_);
  std::chrono::milliseconds interval_ RDMX_GUARDED_BY(mutex_){1000};
};

}  // namespace rdmx::coll
