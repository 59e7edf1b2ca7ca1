// SPDX-License-Identifier: MIT
// The TCP store client.
//
// One connection, one request in flight at a time (a mutex serialises
// threads sharing the client). Every wait on the socket is a poll() bounded
// by a deadline, so a silent server costs at most the timeout, and a dead one
// is reported as PeerFailure as soon as its socket closes.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "bootstrap/net.hpp"
#include "bootstrap/tcp_store_protocol.hpp"
#include "services/auth.hpp"
#include "services/config.hpp"
#include "services/log.hpp"
#include "services/mutex.hpp"
#include "services/wait.hpp"

namespace rdmx {
namespace bootstrap {
namespace {

using wire::Op;
using wire::Status;
using Clock = core::Clock;
using std::chrono::milliseconds;

// How long a client waits for the server's own Timeout answer after its
// deadline, to learn which keys were still missing.
constexpr milliseconds kTimeoutAnswerGrace{300};
const char* kServerGoneHint =
    "the process serving the store (rank 0 via from_env(), or rdmx_store) exited or crashed; "
    "check its log, it is usually the first failure";

struct Response {
  Status status = Status::Ok;
  std::vector<std::string> args;
};

std::string keys_sizes(const std::vector<std::string>& keys, milliseconds timeout) {
  return "keys=" + std::to_string(keys.size()) + " timeout=" + describe_timeout(timeout);
}

class TcpStore final : public Store {
 public:
  TcpStore(UniqueFd fd, std::string address) : fd_(std::move(fd)), address_(std::move(address)) {}

  using Store::get;
  using Store::set;
  using Store::wait;

  void set(const std::string& key, const Bytes& value) override {
    validate_key(key, "store.set", address_);
    validate_value(value.size(), "store.set", key, address_);
    call(Op::Set, {key, as_view(value)}, std::nullopt, {key});
  }

  Bytes get(const std::string& key, milliseconds timeout) override {
    validate_key(key, "store.get", address_);
    Response response = call(Op::Get, {key}, timeout, {key});
    expect_args(response, 1, Op::Get);
    return to_bytes(response.args[0]);
  }

  void wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    if (keys.empty()) return;
    if (keys.size() > kMaxWaitKeys) {
      throw Error(ErrorCode::InvalidArgument, "store.wait: too many keys in one call",
                  ErrorContext{.op = "store.wait",
                               .peer_addr = address_,
                               .sizes = "keys=" + std::to_string(keys.size()) + " max=" + std::to_string(kMaxWaitKeys),
                               .hint = "wait in batches"});
    }
    std::vector<std::string_view> args;
    args.reserve(keys.size());
    std::size_t total = 0;
    for (const auto& key : keys) {
      validate_key(key, "store.wait", address_);
      args.emplace_back(key);
      total += key.size();
    }
    if (total > wire::kMaxFrameArgBytes) {
      throw Error(ErrorCode::InvalidArgument, "store.wait: the keys of one call are too large together",
                  ErrorContext{
                      .op = "store.wait",
                      .peer_addr = address_,
                      .sizes = "key_bytes=" + std::to_string(total) + " max=" + std::to_string(wire::kMaxFrameArgBytes),
                      .hint = "wait in batches"});
    }
    call(Op::Wait, args, timeout, keys);
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    validate_key(key, "store.add", address_);
    std::string encoded = wire::encode_i64(delta);
    Response response = call(Op::Add, {key, encoded}, std::nullopt, {key});
    expect_args(response, 1, Op::Add);
    if (response.args[0].size() != 8) {
      core::LockGuard lock(mutex_);
      protocol_error(Op::Add, "add answer is not 8 bytes");
    }
    return static_cast<std::int64_t>(wire::get_u64(response.args[0].data()));
  }

  bool remove(const std::string& key) override {
    validate_key(key, "store.remove", address_);
    return flag_answer(call(Op::Remove, {key}, std::nullopt, {key}), Op::Remove);
  }

  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    validate_key(key, "store.compare_set", address_);
    validate_value(expected.size(), "store.compare_set", key, address_);
    validate_value(desired.size(), "store.compare_set", key, address_);
    Response response = call(Op::CompareSet, {key, as_view(expected), as_view(desired)}, std::nullopt, {key});
    expect_args(response, 1, Op::CompareSet);
    return to_bytes(response.args[0]);
  }

  bool check(const std::string& key) override {
    validate_key(key, "store.check", address_);
    return flag_answer(call(Op::Check, {key}, std::nullopt, {key}), Op::Check);
  }

  StoreStats stats() override {
    Response response = call(Op::Stats, {}, std::nullopt, {});
    expect_args(response, 4, Op::Stats);
    std::int64_t figures[4];
    for (std::size_t i = 0; i < 4; ++i) {
      if (response.args[i].size() != 8) {
        core::LockGuard lock(mutex_);
        protocol_error(Op::Stats, "stats answer field is not 8 bytes");
      }
      figures[i] = static_cast<std::int64_t>(wire::get_u64(response.args[i].data()));
    }
    return StoreStats{.keys = figures[0], .bytes = figures[1], .parked = figures[2], .clients = figures[3]};
  }

  std::vector<std::string> keys(const std::string& prefix) override {
    if (prefix.size() > kMaxKeyBytes) validate_key(prefix, "store.keys", address_);
    std::vector<std::string> out;
    // Page by page, each after the last key of the one before, so that no
    // answer grows with the store.
    for (;;) {
      const std::string after = out.empty() ? std::string() : out.back();
      Response response = call(Op::Keys, {prefix, after}, std::nullopt, {});
      if (response.args.empty() || response.args[0].size() != 1 || response.args.size() - 1 > wire::kKeysPerAnswer) {
        core::LockGuard lock(mutex_);
        protocol_error(Op::Keys, "keys answer without its completeness flag, or with too many keys");
      }
      for (std::size_t i = 1; i < response.args.size(); ++i) {
        if (!out.empty() && response.args[i] <= out.back()) {
          core::LockGuard lock(mutex_);
          protocol_error(Op::Keys, "keys answer out of order");
        }
        out.push_back(std::move(response.args[i]));
      }
      if (response.args[0][0] != 0 || response.args.size() == 1) return out;
    }
  }

  // The connection handshake: proves the job secret to the server and has
  // the server prove it in return, then checks that the server speaks this
  // protocol. No request leaves before the server's proof has verified.
  void hello(Clock::time_point deadline, milliseconds timeout) {
    core::LockGuard lock(mutex_);
    char challenge_frame[wire::kChallengeFrameBytes];
    bool started = false;
    IoResult got = recv_all(fd_.get(), challenge_frame, sizeof(challenge_frame), deadline, started);
    if (got.failure != IoFailure::None) fail_io(Op::Hello, got, {}, timeout, !started);
    if (!wire::is_auth_frame_head(challenge_frame)) {
      protocol_error(Op::Hello, "the server at " + address_ +
                                    " did not open with an rdmx store challenge (an rdmx of another version, or not "
                                    "an rdmx store)");
    }
    const bool have_key = core::auth::key_configured();
    if (challenge_frame[5] == 1 && !have_key) {
      throw Error(
          ErrorCode::Config,
          "store.hello: the store at " + address_ + " requires a proof of the job secret and this process has none",
          ErrorContext{.op = "store.hello",
                       .peer_addr = address_,
                       .hint = "set RDMX_AUTH_KEY (or RDMX_AUTH_KEY_FILE) to the job's secret, as the server has"});
    }
    if (challenge_frame[5] != 1 && have_key) {
      refuse_server("asks for no proof of the job secret, and this process has one");
    }
    core::auth::Challenge challenge;
    std::memcpy(challenge.data(), challenge_frame + 8, challenge.size());
    const core::auth::Challenge ours = core::auth::new_challenge();
    const core::auth::Proof proof = core::auth::prove(wire::kAuthPurpose, challenge);
    std::string frame = wire::auth_frame_head(0);
    frame.append(reinterpret_cast<const char*>(proof.data()), proof.size());
    frame.append(reinterpret_cast<const char*>(ours.data()), ours.size());
    IoResult sent = send_all(fd_.get(), frame.data(), frame.size(), deadline);
    if (sent.failure != IoFailure::None) fail_io(Op::Hello, sent, {}, timeout, false);
    char verdict[wire::kVerdictFrameBytes];
    started = false;
    got = recv_all(fd_.get(), verdict, sizeof(verdict), deadline, started);
    if (got.failure != IoFailure::None) fail_io(Op::Hello, got, {}, timeout, !started);
    if (!wire::is_auth_frame_head(verdict)) protocol_error(Op::Hello, "the server's verdict on the proof is malformed");
    if (verdict[5] != 1) {
      broken_ = "the server refused this client's proof of the job secret";
      broken_code_ = ErrorCode::Config;
      throw Error(ErrorCode::Config,
                  "store.hello: the store at " + address_ + " refused this client's proof of the job secret",
                  ErrorContext{.op = "store.hello",
                               .peer_addr = address_,
                               .hint = "RDMX_AUTH_KEY (or RDMX_AUTH_KEY_FILE) differs between this process and the "
                                       "server; give every rank the job's secret"});
    }
    core::auth::Proof theirs;
    std::memcpy(theirs.data(), verdict + 8, theirs.size());
    if (!core::auth::verify(wire::kServerAuthPurpose, ours, challenge, theirs)) {
      refuse_server("did not prove the job secret in return");
    }
    const std::uint64_t id = ++next_request_id_;
    const std::string request = wire::encode_request(Op::Hello, id, -1, {});
    sent = send_all(fd_.get(), request.data(), request.size(), deadline);
    if (sent.failure != IoFailure::None) fail_io(Op::Hello, sent, {}, timeout, false);
    Response response = read_answer(Op::Hello, id, deadline, {}, timeout);
    if (response.status != Status::Ok) protocol_error(Op::Hello, "the server refused the handshake");
  }

 private:
  // A server that cannot prove the job secret is not this job's store: a
  // rank 0 started without the secret, or another process on the port.
  [[noreturn]] void refuse_server(const std::string& why) RDMX_REQUIRES(mutex_) {
    broken_ = "the server " + why;
    broken_code_ = ErrorCode::Config;
    throw Error(ErrorCode::Config,
                "store.hello: the store at " + address_ + " " + why +
                    "; this client sent it no request and closed the connection",
                ErrorContext{.op = "store.hello",
                             .peer_addr = address_,
                             .hint = "give every rank, the one serving the store included, the same RDMX_AUTH_KEY "
                                     "(or RDMX_AUTH_KEY_FILE); if they have it, something else may be listening on "
                                     "that port: check the store address and port (RDMX_STORE, MASTER_ADDR/"
                                     "MASTER_PORT)"});
  }

  static std::string_view as_view(const Bytes& bytes) {
    return std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }

  // Sends one request and returns its answer; `timeout` is set for the ops
  // that park on the server (get, wait).
  Response call(Op op, const std::vector<std::string_view>& args, std::optional<milliseconds> timeout,
                const std::vector<std::string>& keys) {
    core::LockGuard lock(mutex_);
    if (!broken_.empty()) {
      throw Error(
          broken_code_,
          std::string(wire::op_name(op)) + ": the connection to the store server at " + address_ +
              " is unusable: " + broken_,
          ErrorContext{.op = wire::op_name(op),
                       .peer_addr = address_,
                       .hint = broken_code_ == ErrorCode::PeerFailure ? kServerGoneHint
                                                                      : "open a new client with connect_tcp_store()"});
    }
    // Non-blocking ops are answered at once by a live server; RDMX_TIMEOUT
    // bounds them against a server that stopped answering.
    milliseconds bound = timeout.value_or(core::timeout());
    auto deadline = core::deadline_after(bound);
    auto answer_deadline = timeout && deadline != Clock::time_point::max() ? deadline + kTimeoutAnswerGrace : deadline;
    std::int64_t timeout_ms = timeout && timeout->count() >= 0 ? timeout->count() : -1;  // the wire's "none" is -1
    Response response = exchange(op, args, timeout_ms, answer_deadline, keys, bound);
    if (response.status == Status::Ok) return response;
    if (response.status == Status::Timeout) {
      std::vector<std::string> missing = response.args.empty() ? keys : response.args;
      throw_timeout(op, missing, keys, bound);
    }
    std::string message = response.args.empty() ? std::string("refused") : response.args[0];
    throw Error(ErrorCode::InvalidArgument, std::string(wire::op_name(op)) + ": " + message,
                ErrorContext{.op = wire::op_name(op), .peer_addr = address_, .sizes = keys_sizes(keys, bound)});
  }

  Response exchange(Op op, const std::vector<std::string_view>& args, std::int64_t timeout_ms,
                    Clock::time_point deadline, const std::vector<std::string>& keys,
                    milliseconds bound = milliseconds(-1)) RDMX_REQUIRES(mutex_) {
    std::uint64_t id = ++next_request_id_;
    std::string frame = wire::encode_request(op, id, timeout_ms, args);
    IoResult sent = send_all(fd_.get(), frame.data(), frame.size(), deadline);
    if (sent.failure != IoFailure::None) {
      // A partly sent request leaves the stream unusable.
      fail_io(op, sent, keys, bound, /*stream_intact=*/false);
    }
    return read_answer(op, id, deadline, keys, bound);
  }

  // Reads responses until the one to request `id`.
  Response read_answer(Op op, std::uint64_t id, Clock::time_point deadline, const std::vector<std::string>& keys,
                       milliseconds bound) RDMX_REQUIRES(mutex_) {
    for (;;) {
      char header[wire::kResponseHeaderBytes];
      bool started = false;
      IoResult got = recv_all(fd_.get(), header, sizeof(header), deadline, started);
      if (got.failure != IoFailure::None) fail_io(op, got, keys, bound, !started);
      if (wire::get_u32(header) != wire::kMagic || static_cast<std::uint8_t>(header[4]) != wire::kVersion ||
          wire::get_u16(header + 6) != 0) {
        protocol_error(op, "the server at " + address_ + " answered with bytes that are not an rdmx store response");
      }
      auto status = static_cast<std::uint8_t>(header[5]);
      if (status > static_cast<std::uint8_t>(Status::Invalid))
        protocol_error(op, "unknown status " + std::to_string(status));
      std::uint64_t answered = wire::get_u64(header + 8);
      std::uint32_t nargs = wire::get_u32(header + 16);
      if (nargs > kMaxWaitKeys) protocol_error(op, "answer with " + std::to_string(nargs) + " arguments");
      Response response;
      response.status = static_cast<Status>(status);
      response.args.reserve(nargs);
      std::size_t total = 0;
      for (std::uint32_t i = 0; i < nargs; ++i) {
        char length_bytes[4];
        IoResult length_read = recv_all(fd_.get(), length_bytes, 4, deadline, started);
        if (length_read.failure != IoFailure::None) fail_io(op, length_read, keys, bound, false);
        std::uint32_t length = wire::get_u32(length_bytes);
        total += length;
        if (length > kMaxValueBytes || total > wire::kMaxFrameArgBytes) {
          protocol_error(op, "answer argument of " + std::to_string(length) + " bytes");
        }
        std::string arg(length, '\0');
        IoResult arg_read = recv_all(fd_.get(), arg.data(), length, deadline, started);
        if (arg_read.failure != IoFailure::None) fail_io(op, arg_read, keys, bound, false);
        response.args.push_back(std::move(arg));
      }
      // An answer to a request we gave up on earlier: skip it.
      if (answered < id) continue;
      if (answered != id)
        protocol_error(op, "answer to request " + std::to_string(answered) + ", expected " + std::to_string(id));
      return response;
    }
  }

  [[noreturn]] void fail_io(Op op, const IoResult& result, const std::vector<std::string>& keys, milliseconds bound,
                            bool stream_intact) RDMX_REQUIRES(mutex_) {
    const char* name = wire::op_name(op);
    if (result.failure == IoFailure::Closed) {
      std::string why = result.error != 0 ? std::strerror(result.error) : std::string("connection closed");
      broken_ = "the server closed the connection (" + why + ")";
      broken_code_ = ErrorCode::PeerFailure;
      throw Error(ErrorCode::PeerFailure,
                  std::string(name) + ": lost the store server at " + address_ + " (" + why + ")" +
                      (keys.empty() ? std::string() : " during the request for " + printable_keys(keys)),
                  ErrorContext{.op = name, .peer_addr = address_, .hint = kServerGoneHint});
    }
    if (!stream_intact) {
      broken_ = std::string("an earlier ") + name + " was interrupted mid-message";
      broken_code_ = result.failure == IoFailure::Timeout ? ErrorCode::Timeout : ErrorCode::InvalidState;
    }
    if (result.failure == IoFailure::Aborted) {
      throw Error(ErrorCode::InvalidState, std::string(name) + " aborted (rdmx::core::abort_waits())",
                  ErrorContext{.op = name, .peer_addr = address_});
    }
    if (op == Op::Get || op == Op::Wait) throw_timeout(op, keys, keys, bound, /*server_silent=*/true);
    throw Error(
        ErrorCode::Timeout,
        std::string(name) + ": the store server at " + address_ + " did not answer within " + describe_timeout(bound),
        ErrorContext{.op = name,
                     .peer_addr = address_,
                     .sizes = keys_sizes(keys, bound),
                     .hint = op == Op::Hello
                                 ? "something accepted the connection but does not speak the rdmx store "
                                   "protocol (e.g. torch.distributed's TCPStore on MASTER_PORT?); point "
                                   "RDMX_STORE at an rdmx store"
                                 : "the server is alive but not answering (stopped, overloaded or a network "
                                   "problem); raise RDMX_TIMEOUT if it is just slow"});
  }

  // `server_silent`: the server did not even send its own timeout answer, so
  // it may be stopped or overloaded rather than just lacking the keys.
  [[noreturn]] void throw_timeout(Op op, const std::vector<std::string>& missing, const std::vector<std::string>& keys,
                                  milliseconds bound, bool server_silent = false) {
    const char* name = wire::op_name(op);
    throw Error(ErrorCode::Timeout,
                std::string(name) + ": key" + (missing.size() == 1 ? " " : "s ") + printable_keys(missing) +
                    " did not appear in the store at " + address_ + " within " + describe_timeout(bound) +
                    (server_silent ? " (and the server did not answer at all: stopped or overloaded?)" : ""),
                ErrorContext{.op = name,
                             .peer_addr = address_,
                             .sizes = "missing=" + std::to_string(missing.size()) + "/" + std::to_string(keys.size()) +
                                      " timeout=" + describe_timeout(bound),
                             .hint = kMissingKeyHint});
  }

  [[noreturn]] void protocol_error(Op op, const std::string& what) RDMX_REQUIRES(mutex_) {
    broken_ = what;
    broken_code_ = ErrorCode::Protocol;
    throw Error(ErrorCode::Protocol, std::string(wire::op_name(op)) + ": " + what,
                ErrorContext{.op = wire::op_name(op),
                             .peer_addr = address_,
                             .hint = "is something else listening on this port (e.g. torch.distributed's TCPStore "
                                     "on MASTER_PORT)? point RDMX_STORE at an rdmx store"});
  }

  void expect_args(const Response& response, std::size_t count, Op op) {
    if (response.args.size() != count) {
      core::LockGuard lock(mutex_);
      protocol_error(
          op, "answer with " + std::to_string(response.args.size()) + " arguments, expected " + std::to_string(count));
    }
  }

  bool flag_answer(const Response& response, Op op) {
    expect_args(response, 1, op);
    if (response.args[0].size() != 1) {
      core::LockGuard lock(mutex_);
      protocol_error(op, "flag answer is not 1 byte");
    }
    return response.args[0][0] != 0;
  }

  core::Mutex mutex_;
  UniqueFd fd_ RDMX_GUARDED_BY(mutex_);
  std::string address_;
  std::uint64_t next_request_id_ RDMX_GUARDED_BY(mutex_) = 0;
  // Why the connection cannot be used any more; empty while it can.
  std::string broken_ RDMX_GUARDED_BY(mutex_);
  ErrorCode broken_code_ RDMX_GUARDED_BY(mutex_) = ErrorCode::PeerFailure;
};

// One non-blocking connect attempt bounded by `deadline`; returns the socket
// or sets `error`.
UniqueFd try_connect(const SocketAddress& address, Clock::time_point deadline, std::string& error) {
  UniqueFd fd(::socket(address.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) {
    error = std::string("socket: ") + std::strerror(errno);
    return fd;
  }
  if (::connect(fd.get(), address.get(), address.length) != 0) {
    if (errno != EINPROGRESS) {
      error = std::strerror(errno);
      return UniqueFd();
    }
    for (;;) {
      int ready = poll_once(fd.get(), POLLOUT, deadline);
      if (ready > 0) break;
      if (ready == 0 && Clock::now() >= deadline) {
        error = "connect timed out";
        return UniqueFd();
      }
      if (core::waits_aborted()) {
        error = "aborted";
        return UniqueFd();
      }
    }
    int socket_error = 0;
    socklen_t length = sizeof(socket_error);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &socket_error, &length);
    if (socket_error != 0) {
      error = std::strerror(socket_error);
      return UniqueFd();
    }
  }
  int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // Detect a vanished server host (no FIN ever arrives) within a few minutes at
  // worst, for connections that sit idle between phases of a job.
  ::setsockopt(fd.get(), SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  return fd;
}

}  // namespace
}  // namespace bootstrap

std::unique_ptr<Store> connect_tcp_store(const std::string& host, std::uint16_t port,
                                         std::chrono::milliseconds timeout) {
  using namespace bootstrap;
  std::string address = format_host_port(host, port);
  if (host.empty() || port == 0) {
    throw Error(ErrorCode::InvalidArgument, "connect_tcp_store needs a host and a non-zero port, got " + address,
                ErrorContext{.op = "connect_tcp_store", .peer_addr = address});
  }
  core::auth::warn_if_unauthenticated("store client");
  auto deadline = core::deadline_after(timeout);
  auto backoff = std::chrono::milliseconds(2);
  std::string last_error;
  int attempts = 0;
  for (;;) {
    ++attempts;
    // Resolve on each attempt: a name may start resolving once its host is up.
    auto addresses = resolve_tcp(host, port, false, last_error);
    for (const auto& candidate : addresses) {
      std::string error;
      UniqueFd fd = try_connect(candidate, deadline, error);
      if (!fd) {
        // An attempt cut short by the deadline says less than the error before it.
        if (last_error.empty() || Clock::now() < deadline) {
          last_error = to_string(candidate.get(), candidate.length) + ": " + error;
        }
        continue;
      }
      auto store = std::make_unique<TcpStore>(std::move(fd), address);
      try {
        store->hello(deadline, timeout);
      } catch (const Error& e) {
        if (e.code() != ErrorCode::PeerFailure) throw;
        // The listener accepted but closed at once (e.g. a server shutting
        // down, or a backlog overflow): try again.
        last_error = e.message();
        continue;
      }
      RDMX_INFO("connected to the store at %s after %d attempt(s)", address.c_str(), attempts);
      return store;
    }
    if (core::waits_aborted()) {
      throw Error(ErrorCode::InvalidState, "connect_tcp_store aborted (rdmx::core::abort_waits())",
                  ErrorContext{.op = "connect_tcp_store", .peer_addr = address});
    }
    auto now = Clock::now();
    if (now >= deadline) break;
    auto pause = std::min<Clock::duration>(backoff, deadline - now);
    ::poll(nullptr, 0,
           static_cast<int>(std::max<std::int64_t>(1, std::chrono::duration_cast<milliseconds>(pause).count())));
    backoff = std::min(backoff * 2, milliseconds(100));
  }
  throw Error(ErrorCode::Timeout,
              "connect_tcp_store: no store server answered at " + address + " within " + describe_timeout(timeout) +
                  " (" + std::to_string(attempts) + " attempts; last error: " + last_error + ")",
              ErrorContext{.op = "connect_tcp_store",
                           .peer_addr = address,
                           .hint = "start the server first (rank 0 serves it in from_env() when the store host is "
                                   "one of its addresses; otherwise run `rdmx_store --host H --port P`); check the "
                                   "host, the port and firewalls"});
}

}  // namespace rdmx
