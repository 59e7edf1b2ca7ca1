// SPDX-License-Identifier: MIT
// What the TCP store server does with each request: reads and writes of
// the data (bounded by StoreData), and get/wait requests parked until their
// keys appear or their deadline passes.
#include <algorithm>
#include <string>

#include "bootstrap/tcp_store_server_state.hpp"
#include "services/log.hpp"

namespace rdmx {

void TcpStoreServer::Impl::refuse_write(std::uint64_t id, std::uint64_t request_id,
                                        const bootstrap::Connection& connection, const std::string& why) {
  RDMX_INFO("store server %s: refused a write of client %s: %s", address.c_str(), connection.peer.c_str(), why.c_str());
  reply(id, request_id, bootstrap::Status::Invalid, {why});
}

void TcpStoreServer::Impl::handle(std::uint64_t id, bootstrap::Connection& connection, bootstrap::Request& request) {
  using namespace bootstrap;
  auto& args = request.args;
  switch (request.op) {
    case Op::Hello: reply(id, request.id, Status::Ok, {"rdmx-store/1"}); return;
    case Op::Set:
      if (auto why = data.put(id, args[0], std::move(args[1])); !why.empty())
        return refuse_write(id, request.id, connection, why);
      reply(id, request.id, Status::Ok, {});
      key_written(args[0]);
      return;
    case Op::Get: {
      if (const std::string* value = data.find(args[0])) {
        reply(id, request.id, Status::Ok, {*value});
      } else {
        park(id, connection, request, {args[0]});
      }
      return;
    }
    case Op::Wait: {
      std::unordered_set<std::string> missing;
      for (auto& key : args) {
        if (!data.contains(key)) missing.insert(std::move(key));
      }
      if (missing.empty()) {
        reply(id, request.id, Status::Ok, {});
      } else {
        park(id, connection, request, std::move(missing));
      }
      return;
    }
    case Op::Add: {
      auto delta = static_cast<std::int64_t>(wire::get_u64(args[1].data()));
      std::int64_t current = 0;
      if (const std::string* value = data.find(args[0])) {
        auto parsed = parse_int64(*value);
        if (!parsed) {
          reply(id, request.id, Status::Invalid,
                {"the value at key " + printable_key(args[0]) + " is not a decimal integer"});
          return;
        }
        current = *parsed;
      }
      auto updated = static_cast<std::int64_t>(static_cast<std::uint64_t>(current) + static_cast<std::uint64_t>(delta));
      if (auto why = data.put(id, args[0], std::to_string(updated)); !why.empty()) {
        return refuse_write(id, request.id, connection, why);
      }
      reply(id, request.id, Status::Ok, {wire::encode_i64(updated)});
      key_written(args[0]);
      return;
    }
    case Op::Remove: {
      bool removed = data.erase(args[0]);
      reply(id, request.id, Status::Ok, {removed ? std::string_view("\1", 1) : std::string_view("\0", 1)});
      return;
    }
    case Op::CompareSet: {
      const std::string* value = data.find(args[0]);
      bool matches = value != nullptr ? *value == args[1] : args[1].empty();
      if (!matches) {
        reply(id, request.id, Status::Ok, {value != nullptr ? std::string_view(*value) : std::string_view()});
        return;
      }
      if (auto why = data.put(id, args[0], args[2]); !why.empty()) return refuse_write(id, request.id, connection, why);
      reply(id, request.id, Status::Ok, {args[2]});
      key_written(args[0]);
      return;
    }
    case Op::Check: {
      bool exists = data.contains(args[0]);
      reply(id, request.id, Status::Ok, {exists ? std::string_view("\1", 1) : std::string_view("\0", 1)});
      return;
    }
    case Op::Stats: {
      const std::string keys = wire::encode_i64(static_cast<std::int64_t>(data.size()));
      const std::string bytes = wire::encode_i64(static_cast<std::int64_t>(data.bytes()));
      const std::string parked = wire::encode_i64(static_cast<std::int64_t>(waiters.size()));
      const std::string clients = wire::encode_i64(static_cast<std::int64_t>(connections.size()));
      reply(id, request.id, Status::Ok, {keys, bytes, parked, clients});
      return;
    }
    case Op::Keys: {
      std::vector<std::string> found = data.keys_after(args[0], args[1], wire::kKeysPerAnswer + 1);
      const bool complete = found.size() <= wire::kKeysPerAnswer;
      if (!complete) found.pop_back();
      std::vector<std::string_view> answer{complete ? std::string_view("\1", 1) : std::string_view("\0", 1)};
      answer.insert(answer.end(), found.begin(), found.end());
      reply(id, request.id, Status::Ok, answer);
      return;
    }
  }
}

void TcpStoreServer::Impl::park(std::uint64_t id, bootstrap::Connection& connection, const bootstrap::Request& request,
                                std::unordered_set<std::string> missing) {
  if (connection.waiters.size() >= bootstrap::kMaxParkedPerConnection) {
    drop(connection, "more than " + std::to_string(bootstrap::kMaxParkedPerConnection) + " parked get/wait requests",
         true);
    return;
  }
  std::uint64_t waiter_id = next_waiter_id++;
  bootstrap::Waiter& waiter = waiters[waiter_id];
  waiter.connection = id;
  waiter.request_id = request.id;
  waiter.op = request.op;
  if (request.op == bootstrap::Op::Get) waiter.get_key = request.args[0];
  waiter.missing = std::move(missing);
  for (const auto& key : waiter.missing) waiters_by_key[key].push_back(waiter_id);
  // Beyond a month a deadline is as good as none (and cannot overflow the clock).
  constexpr std::int64_t kLongestDeadlineMs = std::int64_t{30} * 24 * 3600 * 1000;
  if (request.timeout_ms >= 0 && request.timeout_ms <= kLongestDeadlineMs) {
    waiter.deadline = bootstrap::Clock::now() + std::chrono::milliseconds(request.timeout_ms);
    deadlines.emplace(waiter.deadline, waiter_id);
  }
  connection.waiters.insert(waiter_id);
}

void TcpStoreServer::Impl::key_written(const std::string& key) {
  auto indexed = waiters_by_key.find(key);
  if (indexed == waiters_by_key.end()) return;
  std::vector<std::uint64_t> ids = std::move(indexed->second);
  waiters_by_key.erase(indexed);
  for (std::uint64_t waiter_id : ids) {
    auto it = waiters.find(waiter_id);
    if (it == waiters.end()) continue;
    bootstrap::Waiter& waiter = it->second;
    waiter.missing.erase(key);
    if (!waiter.missing.empty()) continue;
    if (waiter.op == bootstrap::Op::Get) {
      reply(waiter.connection, waiter.request_id, bootstrap::Status::Ok, {*data.find(waiter.get_key)});
    } else {
      reply(waiter.connection, waiter.request_id, bootstrap::Status::Ok, {});
    }
    remove_waiter(waiter_id);
  }
}

void TcpStoreServer::Impl::remove_waiter(std::uint64_t waiter_id) {
  auto it = waiters.find(waiter_id);
  if (it == waiters.end()) return;
  bootstrap::Waiter& waiter = it->second;
  for (const auto& key : waiter.missing) {
    auto indexed = waiters_by_key.find(key);
    if (indexed == waiters_by_key.end()) continue;
    std::erase(indexed->second, waiter_id);
    if (indexed->second.empty()) waiters_by_key.erase(indexed);
  }
  if (waiter.deadline != bootstrap::Clock::time_point::max()) deadlines.erase({waiter.deadline, waiter_id});
  auto connection = connections.find(waiter.connection);
  if (connection != connections.end()) connection->second.waiters.erase(waiter_id);
  waiters.erase(it);
}

void TcpStoreServer::Impl::expire_waiters() {
  auto now = bootstrap::Clock::now();
  while (!deadlines.empty() && deadlines.begin()->first <= now) {
    std::uint64_t waiter_id = deadlines.begin()->second;
    auto it = waiters.find(waiter_id);
    if (it == waiters.end()) {
      deadlines.erase(deadlines.begin());
      continue;
    }
    // The answer lists the keys still missing, so the client can name them.
    std::vector<std::string> missing(it->second.missing.begin(), it->second.missing.end());
    std::sort(missing.begin(), missing.end());
    std::vector<std::string_view> args(missing.begin(), missing.end());
    reply(it->second.connection, it->second.request_id, bootstrap::Status::Timeout, args);
    remove_waiter(waiter_id);
  }
}

}  // namespace rdmx
