// SPDX-License-Identifier: MIT
// What the TCP store server's thread holds: its connections, the parked
// get/wait requests, the data and the bounds on all three. The connections'
// life is in tcp_store_server.cpp, what requests do in tcp_store_server_ops.cpp.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "bootstrap/net.hpp"
#include "bootstrap/store_data.hpp"
#include "bootstrap/tcp_store_protocol.hpp"
#include "bootstrap/tcp_store_request.hpp"
#include "rdmx/bootstrap.hpp"
#include "services/auth.hpp"
#include "services/config.hpp"
#include "services/wait.hpp"

namespace rdmx {

namespace bootstrap {

using wire::Op;
using wire::Status;
using Clock = core::Clock;

inline constexpr std::uint64_t kListenerId = 1;
inline constexpr std::uint64_t kWakeId = 2;
inline constexpr std::uint64_t kFirstConnectionId = 16;
// Bytes read from one connection per readiness event, so one busy client
// cannot starve the others.
inline constexpr std::size_t kReadBudget = std::size_t{4} << 20;
// A client that does not read its answers stops being read from while this
// much output is queued for it.
inline constexpr std::size_t kMaxQueuedOutput = std::size_t{256} << 20;
// Parked get/wait requests one connection may have; a well-behaved client
// has one at a time.
inline constexpr std::size_t kMaxParkedPerConnection = 4096;
// A client proves the job secret one round trip after connecting; one that
// has not within this long (or RDMX_TIMEOUT, if shorter) is closed.
inline constexpr auto kHandshakeBound = std::chrono::seconds(10);
// Bytes of requests not yet whole, buffered for all clients together: past
// this, clients in the middle of a request are not read from until others
// finish theirs (or are closed for taking longer than RDMX_TIMEOUT), so
// many half-sent large values cannot take the host's memory.
inline constexpr std::size_t kMaxBufferedInput = std::size_t{256} << 20;

struct Connection {
  UniqueFd fd;
  std::string peer;
  std::string input;
  std::string output;
  std::size_t output_sent = 0;
  std::uint32_t interest = 0;  // epoll events registered
  std::unordered_set<std::uint64_t> waiters;
  // When the request whose first bytes are in `input` started (max(): none is).
  Clock::time_point request_started = Clock::time_point::max();
  bool input_paused = false;   // not read from while kMaxBufferedInput is taken
  bool authenticated = false;  // its proof verified: its requests are served
  core::auth::Challenge challenge{};
  bool dead = false;  // close at the end of this loop iteration
};

// A parked get or wait.
struct Waiter {
  std::uint64_t connection = 0;
  std::uint64_t request_id = 0;
  Op op = Op::Get;
  std::string get_key;                      // Get: the key whose value is answered
  std::unordered_set<std::string> missing;  // keys that did not exist yet
  Clock::time_point deadline = Clock::time_point::max();
};

}  // namespace bootstrap

struct TcpStoreServer::Impl {
  bootstrap::UniqueFd listener;
  bootstrap::UniqueFd epoll;
  bootstrap::UniqueFd wake;
  std::uint16_t port = 0;
  std::string address;
  std::atomic<bool> stopping{false};
  std::thread thread;

  // Everything below is touched by the server thread only.
  bootstrap::StoreData data{bootstrap::StoreData::limits_from_settings()};
  // Every connection's `input`, together (kMaxBufferedInput).
  std::size_t buffered_input = 0;
  std::unordered_set<std::uint64_t> input_paused;
  // Connections in the middle of a request, by when it must be whole (in order: one bound for all).
  std::deque<std::pair<bootstrap::Clock::time_point, std::uint64_t>> request_deadlines;
  std::unordered_map<std::uint64_t, bootstrap::Connection> connections;
  std::uint64_t next_connection_id = bootstrap::kFirstConnectionId;
  std::unordered_map<std::uint64_t, bootstrap::Waiter> waiters;
  std::unordered_map<std::string, std::vector<std::uint64_t>> waiters_by_key;
  std::set<std::pair<bootstrap::Clock::time_point, std::uint64_t>> deadlines;
  // Connections that have not proved the secret yet, by when they must (in order: one bound for all).
  std::deque<std::pair<bootstrap::Clock::time_point, std::uint64_t>> handshake_deadlines;
  bool key_required = false;
  std::uint64_t next_waiter_id = 1;
  bool accept_paused = false;
  bool raised_open_files_limit = false;
  // Read when the server starts (core::timeout() keeps the first value a process read).
  const std::chrono::milliseconds request_bound = core::read_timeout();

  void run();
  void accept_connections();
  bool raise_open_files_limit();
  void on_event(std::uint64_t id, std::uint32_t events);
  // `hung_up`: the event was EPOLLHUP or EPOLLERR.
  void read_from(std::uint64_t id, bootstrap::Connection& connection, bool hung_up);
  void process_input(std::uint64_t id, bootstrap::Connection& connection);
  // Checks the client's proof; false when the connection was refused.
  bool authenticate(bootstrap::Connection& connection);
  void expire_handshakes();
  // Closes clients whose request stayed partial for RDMX_TIMEOUT.
  void expire_partial_requests();
  void resume_paused_input();
  // A refused write: the client gets the reason as an Invalid answer.
  void refuse_write(std::uint64_t id, std::uint64_t request_id, const bootstrap::Connection& connection,
                    const std::string& why);
  void handle(std::uint64_t id, bootstrap::Connection& connection, bootstrap::Request& request);
  void park(std::uint64_t id, bootstrap::Connection& connection, const bootstrap::Request& request,
            std::unordered_set<std::string> missing);
  void key_written(const std::string& key);
  void remove_waiter(std::uint64_t waiter_id);
  void expire_waiters();
  void reply(std::uint64_t id, std::uint64_t request_id, bootstrap::wire::Status status,
             const std::vector<std::string_view>& args);
  void flush(bootstrap::Connection& connection);
  void update_interest(std::uint64_t id, bootstrap::Connection& connection);
  void close_dead();
  void drop(bootstrap::Connection& connection, const std::string& why, bool warn);
  int next_timeout_ms() const;
};

}  // namespace rdmx
