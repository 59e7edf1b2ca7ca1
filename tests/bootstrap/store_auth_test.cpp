// SPDX-License-Identifier: MIT
// The TCP store's authentication: a server with a job secret serves only
// clients that prove it, refuses the others with an error that says what to
// set, logs each refusal with the source address, never acts on a replayed
// proof, closes connections that never prove anything, and goes on serving;
// and a client with the secret trusts no store that cannot prove it in turn
// (one started without it, or another process on the port).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "bootstrap/tcp_store_protocol.hpp"
#include "process_util.hpp"
#include "raw_store_socket.hpp"
#include "rdmx/bootstrap.hpp"
#include "rdmx/info.hpp"
#include "services/auth.hpp"
#include "support/scoped_env.hpp"

namespace rdmx {
namespace {

using namespace std::chrono_literals;
using test::auth_head;
using test::challenge_of;
using test::closed_within;
using test::proof_frame;
using test::proof_of;
using test::raw_connect;
using test::receive_up_to;
using test::ServerProcess;
using test::TempDir;

constexpr const char* kSecret = "0123456789abcdef0123456789abcdef";
constexpr const char* kOtherSecret = "fedcba9876543210fedcba9876543210";

using test::ScopedEnv;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Polls `path` until it contains `needle` (the server logs from its own thread).
bool log_shows(const std::string& path, const std::string& needle) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (read_file(path).find(needle) != std::string::npos) return true;
    ::poll(nullptr, 0, 10);
  }
  return false;
}

TEST(TcpStoreAuth, ClientsWithTheSecretAreServedOthersAreRefusedAndLogged) {
  TempDir dir;
  const std::string log = dir.path() + "/server.log";
  ScopedEnv key("RDMX_AUTH_KEY", kSecret);
  ServerProcess server("127.0.0.1", 0, log);

  auto good = connect_tcp_store("127.0.0.1", server.port(), 10s);
  good->set("k", std::string_view("v"));
  EXPECT_EQ(good->get_string("k"), "v");

  {
    ScopedEnv wrong("RDMX_AUTH_KEY", kOtherSecret);
    try {
      connect_tcp_store("127.0.0.1", server.port(), 10s);
      ADD_FAILURE() << "a client with another secret was served";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Config) << e.what();
      EXPECT_NE(std::string(e.what()).find("refused this client's proof"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("RDMX_AUTH_KEY"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(log_shows(log, "refused a connection from 127.0.0.1:")) << read_file(log);
  EXPECT_TRUE(log_shows(log, "did not verify")) << read_file(log);

  {
    ScopedEnv none("RDMX_AUTH_KEY", nullptr);
    try {
      connect_tcp_store("127.0.0.1", server.port(), 10s);
      ADD_FAILURE() << "a client without a secret was served";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Config) << e.what();
      EXPECT_NE(std::string(e.what()).find("requires a proof of the job secret"), std::string::npos) << e.what();
    }
  }

  // The server goes on: the first client and a new one are served.
  EXPECT_EQ(good->get_string("k"), "v");
  auto late = connect_tcp_store("127.0.0.1", server.port(), 10s);
  EXPECT_EQ(late->get_string("k"), "v");
  EXPECT_EQ(server.stop(), 0);
}

// Everything the client sends until it closes (bounded: 5 s).
std::string read_until_closed(int fd) {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd pfd{.fd = fd, .events = POLLIN, .revents = 0};
    if (::poll(&pfd, 1, 50) <= 0) continue;
    char buffer[256];
    const ssize_t r = ::recv(fd, buffer, sizeof(buffer), 0);
    if (r <= 0) break;
    out.append(buffer, static_cast<std::size_t>(r));
  }
  return out;
}

// Another process on the store's port that speaks the handshake well enough
// to pass for a store (a well-formed challenge; it accepts whatever proof
// comes and answers the first request) but cannot prove the job secret. It
// keeps every byte the client sends.
class Squatter {
 public:
  explicit Squatter(std::uint8_t key_required) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), length) != 0 || ::listen(listen_fd_, 4) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      ADD_FAILURE() << "squatter: cannot listen: " << std::strerror(errno);
    }
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this, key_required] { serve(key_required); });
  }
  ~Squatter() {
    if (thread_.joinable()) thread_.join();
    ::close(listen_fd_);
  }
  Squatter(const Squatter&) = delete;
  Squatter& operator=(const Squatter&) = delete;

  std::uint16_t port() const { return port_; }
  // Once the client has gone: its proof, if it sent one, and what came after it.
  std::string proof() {
    thread_.join();
    return proof_;
  }
  std::string after_proof() const { return after_proof_; }

 private:
  void serve(std::uint8_t key_required) {
    pollfd pfd{.fd = listen_fd_, .events = POLLIN, .revents = 0};
    if (::poll(&pfd, 1, 10000) <= 0) return;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    const std::string challenge = bootstrap::wire::auth_frame_head(key_required) + std::string(32, 'c');
    ::send(fd, challenge.data(), challenge.size(), MSG_NOSIGNAL);
    proof_ = receive_up_to(fd, bootstrap::wire::kProofFrameBytes);
    if (proof_.size() == bootstrap::wire::kProofFrameBytes) {
      // "Accepted", with a proof it cannot make, and the answer to the client's first request.
      std::string reply =
          bootstrap::wire::auth_frame_head(1) + std::string(bootstrap::wire::kVerdictFrameBytes - 8, 'p');
      bootstrap::wire::append_response(reply, bootstrap::wire::Status::Ok, 1, {"rdmx-store/1"});
      ::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
      after_proof_ = read_until_closed(fd);
    }
    ::close(fd);
  }

  int listen_fd_ = -1;
  std::uint16_t port_ = 0;
  std::thread thread_;
  std::string proof_;
  std::string after_proof_;
};

// A client with the secret that connects to a store which does not prove it
// fails with a Config error naming the store's address and what to check.
void expect_store_refused(std::uint16_t port, const std::string& why) {
  const std::string address = "127.0.0.1:" + std::to_string(port);
  try {
    connect_tcp_store("127.0.0.1", port, 10s);
    ADD_FAILURE() << "a client with the secret trusted a store at " << address << " that did not prove it";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Config) << e.what();
    EXPECT_NE(e.message().find("the store at " + address), std::string::npos) << e.what();
    EXPECT_NE(e.message().find(why), std::string::npos) << e.what();
    EXPECT_NE(e.context().hint.find("the same RDMX_AUTH_KEY"), std::string::npos) << e.what();
    EXPECT_NE(e.context().hint.find("something else may be listening"), std::string::npos) << e.what();
  }
}

TEST(TcpStoreAuth, AClientWithTheSecretRefusesAStoreWithout) {
  std::optional<ServerProcess> server;
  {
    ScopedEnv none("RDMX_AUTH_KEY", nullptr);
    server.emplace();
  }
  ScopedEnv key("RDMX_AUTH_KEY", kSecret);
  expect_store_refused(server->port(), "asks for no proof of the job secret");
  // Clients without the secret are still served by it.
  ScopedEnv none("RDMX_AUTH_KEY", nullptr);
  auto client = connect_tcp_store("127.0.0.1", server->port(), 10s);
  client->set("k", std::string_view("v"));
  EXPECT_EQ(server->stop(), 0);
}

TEST(TcpStoreAuth, AClientWithTheSecretSendsNothingToASquatterThatAsksForNoProof) {
  ScopedEnv key("RDMX_AUTH_KEY", kSecret);
  Squatter squatter(0);
  expect_store_refused(squatter.port(), "asks for no proof of the job secret");
  EXPECT_EQ(squatter.proof(), "") << "the client answered a store that asks for no proof";
}

TEST(TcpStoreAuth, AClientWithTheSecretSendsNoRequestToASquatterThatCannotProveIt) {
  ScopedEnv key("RDMX_AUTH_KEY", kSecret);
  Squatter squatter(1);
  expect_store_refused(squatter.port(), "did not prove the job secret in return");
  EXPECT_EQ(squatter.proof().size(), bootstrap::wire::kProofFrameBytes);
  EXPECT_EQ(squatter.after_proof(), "") << "the client sent a request to a store that did not prove the secret";
}

TEST(TcpStoreAuth, AProofMadeForOneChallengeIsRefusedOnAnother) {
  ScopedEnv key("RDMX_AUTH_KEY", kSecret);
  ServerProcess server;
  const int first = raw_connect(server.port());
  const int second = raw_connect(server.port());
  const std::string challenge_a = receive_up_to(first, 40);
  const std::string challenge_b = receive_up_to(second, 40);
  ASSERT_EQ(challenge_a.size(), 40u);
  ASSERT_EQ(challenge_b.size(), 40u);
  EXPECT_EQ(challenge_a[5], 1) << "a server with a secret says a proof is required";
  EXPECT_NE(challenge_of(challenge_a), challenge_of(challenge_b)) << "two connections got the same challenge";

  // A valid proof for the first connection's challenge, replayed on the second.
  const core::auth::Proof for_a = core::auth::prove("rdmx tcp store v3", challenge_of(challenge_a));
  const std::string set_request = std::string("RDXS") + '\3' + '\2' + std::string(2, '\0') + std::string(8, '\0') +
                                  std::string(8, '\xff') + std::string("\2\0\0\0", 4) + std::string("\1\0\0\0x", 5) +
                                  std::string("\1\0\0\0y", 5);
  ASSERT_GT(::send(second, (proof_frame(for_a) + set_request).data(), 72 + set_request.size(), MSG_NOSIGNAL), 0);
  const std::string verdict = receive_up_to(second, 40);
  ASSERT_EQ(verdict.size(), 40u);
  EXPECT_EQ(verdict[5], 0) << "the replayed proof was accepted";
  EXPECT_EQ(verdict.substr(8), std::string(32, '\0')) << "a refusal carries no proof of the server's";
  EXPECT_TRUE(closed_within(second, 5s));
  ::close(second);

  // The same proof on its own connection is accepted, and the server proves
  // the secret in return over this client's challenge.
  const core::auth::Challenge ours = core::auth::new_challenge();
  ASSERT_GT(::send(first, proof_frame(for_a, ours).data(), 72, MSG_NOSIGNAL), 0);
  const std::string accepted = receive_up_to(first, 40);
  ASSERT_EQ(accepted.size(), 40u);
  EXPECT_EQ(accepted[5], 1);
  const core::auth::Proof theirs = proof_of(accepted);
  EXPECT_TRUE(core::auth::verify("rdmx tcp store server v3", ours, challenge_of(challenge_a), theirs));
  EXPECT_FALSE(core::auth::verify("rdmx tcp store v3", ours, challenge_of(challenge_a), theirs))
      << "the server's proof must not pass for a client's";
  ::close(first);

  // The replayed connection's request was never acted on.
  auto client = connect_tcp_store("127.0.0.1", server.port(), 10s);
  EXPECT_FALSE(client->check("x"));
  EXPECT_EQ(server.stop(), 0);
}

TEST(TcpStoreAuth, ConnectionsThatNeverProveAnythingAreClosed) {
  TempDir dir;
  const std::string log = dir.path() + "/server.log";
  ScopedEnv key("RDMX_AUTH_KEY", kSecret);
  // The handshake bound is min(RDMX_TIMEOUT, 10 s); a process that read
  // RDMX_TIMEOUT before (another case of this executable) keeps that value.
  ScopedEnv timeout("RDMX_TIMEOUT", "1");
  ServerProcess server("127.0.0.1", 0, log);
  const int silent = raw_connect(server.port());
  const int half = raw_connect(server.port());
  ASSERT_EQ(::send(half, "RDXA", 4, MSG_NOSIGNAL), 4);
  EXPECT_TRUE(closed_within(silent, 15s)) << "a silent connection stayed open";
  EXPECT_TRUE(closed_within(half, 15s)) << "a half-sent proof stayed open";
  ::close(silent);
  ::close(half);
  EXPECT_TRUE(log_shows(log, "did not prove the job secret within")) << read_file(log);
  auto client = connect_tcp_store("127.0.0.1", server.port(), 10s);
  client->set("still", std::string_view("served"));
  EXPECT_EQ(server.stop(), 0);
}

TEST(TcpStoreAuth, WithoutASecretEveryClientIsServedAndInfoSaysSo) {
  ScopedEnv none("RDMX_AUTH_KEY", nullptr);
  ServerProcess server;
  auto client = connect_tcp_store("127.0.0.1", server.port(), 10s);
  client->set("k", std::string_view("v"));
  EXPECT_EQ(client->get_string("k"), "v");
  const AuthStatus status = probe_auth();
  EXPECT_FALSE(status.authenticated);
  EXPECT_NE(status.how.find("not authenticated"), std::string::npos) << status.how;
  {
    ScopedEnv key("RDMX_AUTH_KEY", kSecret);
    const AuthStatus on = probe_auth();
    EXPECT_TRUE(on.authenticated) << on.how;
    EXPECT_EQ(on.how.find(kSecret), std::string::npos) << "the secret itself must never be shown";
  }
  EXPECT_EQ(server.stop(), 0);
}

TEST(TcpStoreAuth, AnUnusableSecretIsAConfigErrorNamingTheVariable) {
  {
    ScopedEnv key("RDMX_AUTH_KEY", "short");
    try {
      core::auth::key_configured();
      ADD_FAILURE() << "a 5-byte secret was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Config);
      EXPECT_NE(std::string(e.what()).find("RDMX_AUTH_KEY"), std::string::npos) << e.what();
    }
  }
  TempDir dir;
  const std::string file = dir.path() + "/secret";
  std::ofstream(file) << kSecret << "\n";
  ::chmod(file.c_str(), 0644);
  {
    ScopedEnv key_file("RDMX_AUTH_KEY_FILE", file.c_str());
    try {
      core::auth::key_configured();
      ADD_FAILURE() << "a world-readable secret file was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Config);
      EXPECT_NE(std::string(e.what()).find("readable or writable by others"), std::string::npos) << e.what();
    }
    ::chmod(file.c_str(), 0600);
    EXPECT_TRUE(core::auth::key_configured());
    EXPECT_NE(core::auth::key_source().find(file), std::string::npos);
    // The file's secret and the same text in RDMX_AUTH_KEY prove alike (the newline is not part of it).
    const core::auth::Challenge c = core::auth::new_challenge();
    const core::auth::Proof from_file = core::auth::prove("p", c);
    ScopedEnv no_file("RDMX_AUTH_KEY_FILE", nullptr);
    ScopedEnv key("RDMX_AUTH_KEY", kSecret);
    EXPECT_TRUE(core::auth::verify("p", c, {}, from_file));
    EXPECT_FALSE(core::auth::verify("another purpose", c, {}, from_file));
  }
}

}  // namespace
}  // namespace rdmx
