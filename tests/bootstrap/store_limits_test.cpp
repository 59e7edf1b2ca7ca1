// SPDX-License-Identifier: MIT
// The TCP store server's bounds: what one client may store, what the store
// holds in all, and the memory half-sent requests may take. A client that
// floods the store gets a clear refusal; the others go on being served.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "process_util.hpp"
#include "raw_store_socket.hpp"
#include "rdmx/bootstrap.hpp"
#include "support/sanitizers.hpp"
#include "support/scoped_env.hpp"

namespace rdmx {
namespace {

using namespace std::chrono_literals;
using test::RawSocket;
using test::ScopedEnv;
using test::ServerProcess;

constexpr std::size_t kValue = 100 << 10;

std::unique_ptr<Store> client(const ServerProcess& server) {
  return connect_tcp_store("127.0.0.1", server.port(), 10s);
}

// Sets `prefix`/0, /1, ... of kValue bytes until the store refuses one;
// returns how many it took, and the refusal in *refusal.
int fill_until_refused(Store& store, const std::string& prefix, std::string* refusal) {
  const std::string value(kValue, 'v');
  for (int i = 0; i < 1000; ++i) {
    try {
      store.set(prefix + std::to_string(i), std::string_view(value));
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
      *refusal = e.what();
      return i;
    }
  }
  ADD_FAILURE() << "the store took 1000 values of " << kValue << " bytes from one client";
  return 1000;
}

std::size_t resident_bytes(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

TEST(TcpStoreLimits, OneClientCannotTakeMoreThanItsShare) {
  ScopedEnv per_client("RDMX_STORE_MAX_CLIENT_BYTES", "1M");
  ScopedEnv total("RDMX_STORE_MAX_BYTES", "64M");
  ServerProcess server;
  auto flooder = client(server);
  std::string refusal;
  const int taken = fill_until_refused(*flooder, "flood/", &refusal);
  EXPECT_GE(taken, 9);
  EXPECT_LE(taken, 10);
  EXPECT_NE(refusal.find("RDMX_STORE_MAX_CLIENT_BYTES"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("store.set"), std::string::npos) << refusal;

  // Rewriting its own key takes no more room; what it stored stays readable.
  flooder->set("flood/0", std::string_view(std::string(kValue, 'w')));
  EXPECT_EQ(flooder->get_string("flood/0"), std::string(kValue, 'w'));
  // Another client has its own share.
  auto other = client(server);
  other->set("other/0", std::string_view(std::string(kValue, 'o')));
  EXPECT_EQ(other->get_string("flood/1"), std::string(kValue, 'v'));
  // Removing frees the flooder's room again.
  EXPECT_TRUE(flooder->remove("flood/1"));
  flooder->set("flood/again", std::string_view(std::string(kValue, 'a')));
}

TEST(TcpStoreLimits, TheStoreAsAWholeIsBounded) {
  ScopedEnv per_client("RDMX_STORE_MAX_CLIENT_BYTES", "1M");
  ScopedEnv total("RDMX_STORE_MAX_BYTES", "3M");
  ServerProcess server;
  std::vector<std::unique_ptr<Store>> clients;
  std::string refusal;
  int stored = 0;
  for (int c = 0; c < 6 && refusal.find("RDMX_STORE_MAX_BYTES") == std::string::npos; ++c) {
    clients.push_back(client(server));
    stored += fill_until_refused(*clients.back(), "c" + std::to_string(c) + "/", &refusal);
  }
  EXPECT_NE(refusal.find("the store is full"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("RDMX_STORE_MAX_BYTES"), std::string::npos) << refusal;
  EXPECT_LE(static_cast<std::size_t>(stored) * kValue, std::size_t{3} << 20);
  EXPECT_GE(static_cast<std::size_t>(stored) * kValue, std::size_t{5} << 19);
  // Full is not broken: reads, small control keys' removal, and writes after it.
  EXPECT_EQ(clients[0]->get_string("c0/0"), std::string(kValue, 'v'));
  EXPECT_TRUE(clients[0]->remove("c0/0"));
  clients.back()->set("after", std::string_view("ok"));
  EXPECT_EQ(clients[0]->get_string("after"), "ok");
}

// Sixteen clients each start a 64 MiB value and never finish it: the server
// buffers a bounded amount of them in all, serves a well-behaved client
// meanwhile, and closes each after RDMX_TIMEOUT.
TEST(TcpStoreLimits, HalfSentHugeValuesTakeBoundedMemoryAndAreClosed) {
  if (test::kResidentMemoryNotMeasurable != nullptr) GTEST_SKIP() << test::kResidentMemoryNotMeasurable;
  ScopedEnv timeout("RDMX_TIMEOUT", "8s");
  ServerProcess server;
  const std::size_t before = resident_bytes(server.pid());
  constexpr std::uint32_t kHuge = 64u << 20;
  // A SET of key "k" whose 64 MiB value stops one byte short.
  std::string request = test::request_header(test::kStoreWireVersion, 2, 2) + test::le32(1) + "k" + test::le32(kHuge);
  request.append(kHuge - 1, 'x');
  std::vector<std::unique_ptr<RawSocket>> flood;
  std::vector<std::size_t> sent;
  for (int i = 0; i < 16; ++i) {
    flood.push_back(std::make_unique<RawSocket>(server.port()));
    sent.push_back(0);
  }
  // Push until no socket takes more for a while (the server stopped reading them), at most 10 s.
  const auto start = std::chrono::steady_clock::now();
  auto last_progress = start;
  while (std::chrono::steady_clock::now() < start + 10s && std::chrono::steady_clock::now() - last_progress < 300ms) {
    for (std::size_t i = 0; i < flood.size(); ++i) {
      const std::size_t now_sent = flood[i]->send_some(request, sent[i]);
      if (now_sent != sent[i]) last_progress = std::chrono::steady_clock::now();
      sent[i] = now_sent;
    }
    ::poll(nullptr, 0, 1);
  }
  std::size_t offered = 0;
  for (std::size_t s : sent) offered += s;
  const std::size_t after = resident_bytes(server.pid());
  // Unbounded, the server would hold all 16 x 64 MiB; bounded, 256 MiB and the slack of its buffers' growth.
  EXPECT_GT(offered, std::size_t{256} << 20) << "the flood did not get going";
  EXPECT_LT(after - std::min(after, before), (std::size_t{450} << 20) + test::kSanitizerQuarantineBytes)
      << "half-sent requests took " << ((after - before) >> 20) << " MiB of the server's memory (" << (offered >> 20)
      << " MiB sent)";

  auto good = client(server);
  good->set("during", std::string_view("the flood"));
  EXPECT_EQ(good->get_string("during"), "the flood");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 8s)
      << "the flood was not held before RDMX_TIMEOUT closed it: the checks above did not run during it";

  for (std::size_t i = 0; i < flood.size(); ++i) {
    EXPECT_TRUE(flood[i]->closed_by_server(10s)) << "half-sent request " << i << " still open after RDMX_TIMEOUT";
  }
  EXPECT_EQ(good->get_string("during"), "the flood");
}

}  // namespace
}  // namespace rdmx
