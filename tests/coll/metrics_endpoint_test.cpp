// SPDX-License-Identifier: MIT
// RDMX_METRICS_PORT: every rank serves Prometheus text over real HTTP at
// that port + its local rank, counting its collectives (per operation and
// outcome), their bytes and seconds, the bytes it exchanged with each peer,
// and since when it has made no progress. Scraped here with plain sockets,
// as Prometheus does; a port in use costs a warning, not the job.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "coll/coll_support.hpp"
#include "coll/flight_recorder.hpp"
#include "coll/metrics_endpoint.hpp"
#include "support/text.hpp"

namespace rdmx::test {
namespace {

bool port_free(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

// The lowest port the kernel hands out to connecting sockets.
int first_ephemeral_port() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 32768;
  in >> low;
  return low;
}

// `count` consecutive ports free on loopback now, below the kernel's
// ephemeral range: a port there may be taken by any socket that connects
// (another test's ranks) before the ranks listen on it. The ranges start at
// multiples of 8, so two tests started at once (consecutive process ids)
// take ranges side by side rather than overlapping ones.
int free_ports(int count) {
  constexpr int kBlock = 8;
  if (count > kBlock) throw std::invalid_argument("free_ports: at most 8");
  const int blocks = std::max((first_ephemeral_port() - 10000) / kBlock - 1, 1);
  const int start = static_cast<int>(::getpid() % blocks);
  for (int tried = 0; tried < blocks; ++tried) {
    const int base = 10000 + (start + tried) % blocks * kBlock;
    bool all = true;
    for (int i = 0; i < count && all; ++i) all = port_free(base + i);
    if (all) return base;
  }
  throw std::runtime_error("no free loopback ports");
}

// GET `path` from ip:port (IPv4): the status line and the body.
std::pair<std::string, std::string> http_get(const std::string& ip, int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  CHECK_EQ(::inet_pton(AF_INET, ip.c_str(), &addr.sin_addr), 1) << ip;
  CHECK_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << ip << ":" << port;
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/plain\r\n\r\n";
  CHECK_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
  std::string response;
  char buffer[4096];
  for (int reads = 0; reads < 10000; ++reads) {
    pollfd pfd{.fd = fd, .events = POLLIN, .revents = 0};
    CHECK_GT(::poll(&pfd, 1, 10'000), 0) << "no answer from port " << port;
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    response.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  const auto head_end = response.find("\r\n\r\n");
  CHECK(head_end != std::string::npos) << response;
  return {response.substr(0, response.find("\r\n")), response.substr(head_end + 4)};
}

// The samples of an exposition, by "name{labels}"; a failed CHECK for any
// line that is not a sample, or a sample whose family was not announced.
std::map<std::string, double> samples_of(const std::string& text) {
  static const std::regex kSample(R"(([a-z_]+)\{([a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*)\} (-?[0-9.e+-]+))");
  std::map<std::string, double> out;
  std::set<std::string> typed;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# HELP ", 0) == 0) continue;
    if (line.rfind("# TYPE ", 0) == 0) {
      typed.insert(line.substr(7, line.find(' ', 7) - 7));
      continue;
    }
    std::smatch m;
    CHECK(std::regex_match(line, m, kSample)) << "not a sample: " << line;
    CHECK(typed.contains(m[1].str())) << "no # TYPE before " << line;
    out[m[1].str() + "{" + m[2].str() + "}"] = std::stod(m[4].str());
  }
  return out;
}

double sample(const std::map<std::string, double>& samples, const std::string& key) {
  const auto it = samples.find(key);
  CHECK(it != samples.end()) << "no sample " << key;
  return it->second;
}

class MetricsEndpoint : public ::testing::TestWithParam<std::string> {
 protected:
  static void TearDownTestSuite() { NetNsPair::destroy(); }
};

TEST_P(MetricsEndpoint, EveryRankServesItsCollectivesBytesPeersAndProgress) {
  const int base = free_ports(3);
  ASSERT_TRUE(run_coll_ranks({GetParam(), 3}, [base](RankEnv& env) {
    // Each on its own address: with "mix" the ranks are in two network namespaces.
    ::setenv("RDMX_METRICS_PORT", std::to_string(base).c_str(), 1);
    ::setenv("RDMX_METRICS_HOST", env.ip().c_str(), 1);
    ::setenv("RDMX_LOCAL_RANK", std::to_string(env.rank()).c_str(), 1);
    env.store().set("ip/" + std::to_string(env.rank()), env.ip());
    auto comm = make_comm(env, "metrics");
    std::vector<float> buf(1000, 1.0f);
    for (int i = 0; i < 5; ++i) {
      comm->all_reduce(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::Sum);
    }
    comm->broadcast(buf.data(), buf.size(), DataType::Float32, 0);
    env.barrier("counted");
    const int seen = (env.rank() + 1) % 3;  // a neighbour's endpoint
    const int port = base + seen;
    const std::string ip = env.store().get_string("ip/" + std::to_string(seen));
    const auto [status, body] = http_get(ip, port, "/metrics");
    CHECK_EQ(status, "HTTP/1.1 200 OK") << body;
    const auto samples = samples_of(body);
    const std::string rank = "comm=\"metrics\",rank=\"" + std::to_string(seen) + "\"";
    CHECK_EQ(sample(samples, "rdmx_collectives_total{" + rank + ",op=\"all_reduce\",outcome=\"done\"}"), 5) << body;
    CHECK_EQ(sample(samples, "rdmx_collectives_total{" + rank + ",op=\"all_reduce\",outcome=\"failed\"}"), 0);
    CHECK_EQ(sample(samples, "rdmx_collectives_total{" + rank + ",op=\"broadcast\",outcome=\"done\"}"), 1);
    CHECK_EQ(sample(samples, "rdmx_collective_bytes_total{" + rank + ",op=\"all_reduce\"}"), 5 * 4000);
    CHECK_GT(sample(samples, "rdmx_collective_seconds_total{" + rank + ",op=\"all_reduce\"}"), 0);
    double sent = 0;
    for (int peer = 0; peer < 3; ++peer) {
      if (peer == seen) continue;
      const std::string labels = rank + ",peer=\"" + std::to_string(peer) + "\"";
      sent += sample(samples, "rdmx_peer_sent_bytes_total{" + labels + "}");
      CHECK_GE(sample(samples, "rdmx_peer_received_bytes_total{" + labels + "}"), 0);
    }
    // An all_reduce sends at least (n-1)/n of the buffer from every rank.
    CHECK_GE(sent, 5 * 4000.0 * 2 / 3) << body;
    CHECK_EQ(sample(samples, "rdmx_inside_collective{" + rank + "}"), 0);
    CHECK_GE(sample(samples, "rdmx_seconds_since_progress{" + rank + "}"), 0);
    CHECK_EQ(sample(samples, "rdmx_communicator_ranks{" + rank + "}"), 3);
    CHECK_EQ(http_get(ip, port, "/other").first, "HTTP/1.1 404 Not Found");
    env.barrier("scraped");
  }));
}

// The port of one rank is taken: that rank warns and serves nothing; the
// collectives go on, and the other rank serves. (Both on one host.)
TEST(MetricsEndpointPort, APortInUseIsAWarningNotAFailure) {
  const int base = free_ports(2);
  ASSERT_TRUE(run_coll_ranks({"shm", 2}, [base](RankEnv& env) {
    ::setenv("RDMX_METRICS_PORT", std::to_string(base).c_str(), 1);
    ::setenv("RDMX_LOCAL_RANK", "0", 1);  // both ranks ask for the same port: one gets it
    const std::string log = env.dir() + "/metrics_port." + std::to_string(env.rank()) + ".log";
    log_to_file(log);
    auto comm = make_comm(env, "metrics_busy");
    std::vector<float> buf(100, 1.0f);
    comm->all_reduce(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::Sum);
    CHECK_EQ(buf[0], 2.0f);
    env.barrier("made");
    const std::string text = read_file(log);
    const bool warned = contains(text, "metrics endpoint: cannot listen on 127.0.0.1:" + std::to_string(base));
    env.store().set("warned/" + std::to_string(env.rank()), std::string_view(warned ? "1" : "0"));
    const int warnings = (env.store().get_string("warned/0") == "1") + (env.store().get_string("warned/1") == "1");
    CHECK_EQ(warnings, 1) << text;
    if (!warned) {
      CHECK_EQ(http_get("127.0.0.1", base, "/metrics").first, "HTTP/1.1 200 OK");
    }
    env.barrier("checked");
  }));
}

// Label values are escaped as the exposition format asks.
TEST(MetricsText, LabelsAreEscaped) {
  coll::MetricsSource source;
  source.who = {.tag = "a\"b\\c\nd", .rank = 1, .size = 2};
  source.recorder = std::make_shared<coll::FlightRecorder>(4);
  const std::string text = coll::metrics_text({&source}, coll::unix_ms_now());
  EXPECT_TRUE(contains(text, R"(rdmx_communicator_ranks{comm="a\"b\\c\nd",rank="1"} 2)")) << text;
  EXPECT_TRUE(contains(text, "# TYPE rdmx_collectives_total counter\n")) << text;
}

INSTANTIATE_TEST_SUITE_P(Coll, MetricsEndpoint, ::testing::ValuesIn(tested_providers()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return transport_label(p.param); });

}  // namespace
}  // namespace rdmx::test
