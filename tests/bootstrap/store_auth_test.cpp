// SPDX-License-Identifier: MIT
// The TCP store's authentication: a server with a job secret serves only
// clients that prove it, refuses the others with an error that says what to
// set, logs each refusal with the source address, never acts on a replayed
// proof, closes connections that never prove anything, and goes on serving.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/auth.hpp"
#include "process_util.hpp"
#include "raw_store_socket.hpp"
#include "rdmx/bootstrap.hpp"
#include "rdmx/info.hpp"
#include "support/scoped_env.hpp"

namespace rdmx {
namespace {

using namespace std::chrono_literals;
using test::auth_head;
using test::challenge_of;
using test::closed_within;
using test::proof_frame;
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
  const core::auth::Proof for_a = core::auth::prove("rdmx tcp store v2", challenge_of(challenge_a));
  const std::string set_request = std::string("RDXS") + '\2' + '\2' + std::string(2, '\0') + std::string(8, '\0') +
                                  std::string(8, '\xff') + std::string("\2\0\0\0", 4) + std::string("\1\0\0\0x", 5) +
                                  std::string("\1\0\0\0y", 5);
  ASSERT_GT(::send(second, (proof_frame(for_a) + set_request).data(), 40 + set_request.size(), MSG_NOSIGNAL), 0);
  const std::string verdict = receive_up_to(second, 8);
  ASSERT_EQ(verdict.size(), 8u);
  EXPECT_EQ(verdict[5], 0) << "the replayed proof was accepted";
  EXPECT_TRUE(closed_within(second, 5s));
  ::close(second);

  // The same proof on its own connection is accepted.
  ASSERT_GT(::send(first, proof_frame(for_a).data(), 40, MSG_NOSIGNAL), 0);
  const std::string accepted = receive_up_to(first, 8);
  ASSERT_EQ(accepted.size(), 8u);
  EXPECT_EQ(accepted[5], 1);
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
