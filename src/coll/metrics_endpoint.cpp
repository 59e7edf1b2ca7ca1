// SPDX-License-Identifier: MIT
#include "coll/metrics_endpoint.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "services/log.hpp"
#include "services/mutex.hpp"
#include "services/settings.hpp"

namespace rdmx::coll {
namespace {

constexpr core::IntegerSetting kMetricsPort{
    "RDMX_METRICS_PORT",
    0,
    0,
    65535,
    "port",
    "serve each process's collective metrics for Prometheus at http://RDMX_METRICS_HOST:<this + local rank>/metrics "
    "(0: off; docs/OBSERVING.md)"};
RDMX_SETTING(kMetricsPort);
constexpr core::TextSetting kMetricsHost{
    "RDMX_METRICS_HOST", "127.0.0.1",
    "the address the metrics endpoint listens on (0.0.0.0 or :: for scrapers on other hosts)"};
RDMX_SETTING(kMetricsHost);

// A scraper that has not sent its request by then is dropped: the endpoint
// serves one connection at a time and must not be held.
constexpr int kRequestTimeoutMs = 2000;
constexpr std::size_t kMaxRequestBytes = 8192;

std::string escape_label(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

class Exposition {
 public:
  void family(const char* name, const char* type, const char* help) {
    text_ += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void sample(const char* name, const std::string& labels, double value) {
    char number[64];
    // Counts stay exact integers; seconds need no more than nanoseconds.
    const bool whole = value == std::floor(value) && std::fabs(value) < 9.007199254740992e15;
    std::snprintf(number, sizeof(number), whole ? "%.0f" : "%.9g", value);
    text_ += std::string(name) + "{" + labels + "} " + number + "\n";
  }
  std::string take() { return std::move(text_); }

 private:
  std::string text_;
};

std::string base_labels(const MetricsSource& s) {
  return "comm=\"" + escape_label(s.who.tag) + "\",rank=\"" + std::to_string(s.who.rank) + "\"";
}

int local_rank() {
  for (const char* name :
       {"RDMX_LOCAL_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') {
      char* end = nullptr;
      const long parsed = std::strtol(value, &end, 10);
      if (*end == '\0' && parsed >= 0 && parsed < 65536) return static_cast<int>(parsed);
    }
  }
  return 0;
}

class MetricsServer {
 public:
  static MetricsServer& instance() {
    static auto* const server = new MetricsServer();  // never destroyed: its thread may run at exit
    return *server;
  }

  std::shared_ptr<void> add(MetricsSource source) {
    core::LockGuard lock(mutex_);
    const std::uint64_t id = next_id_++;
    sources_.emplace_back(id, std::move(source));
    start_locked();
    return std::shared_ptr<void>(reinterpret_cast<void*>(id), [](void* id_ptr) {
      MetricsServer& self = instance();
      // Rendering holds the lock: a scrape under way ends before the source goes.
      core::LockGuard hold(self.mutex_);
      const auto gone = reinterpret_cast<std::uint64_t>(id_ptr);
      std::erase_if(self.sources_, [gone](const auto& entry) { return entry.first == gone; });
    });
  }

 private:
  void start_locked() RDMX_REQUIRES(mutex_) {
    const long me = static_cast<long>(::getpid());
    if (listener_pid_ == me) return;  // serving, or tried and said why
    listener_pid_ = me;
    const int port = static_cast<int>(kMetricsPort.read()) + local_rank();
    const std::string host = kMetricsHost.read().value_or("127.0.0.1");
    std::string why;
    const int fd = listen_on(host, port, why);
    if (fd < 0) {
      RDMX_WARN(
          "metrics endpoint: cannot listen on %s:%d (RDMX_METRICS_PORT + local rank): %s; no metrics from "
          "this process (pick a free RDMX_METRICS_PORT range, or unset it)",
          host.c_str(), port, why.c_str());
      return;
    }
    RDMX_INFO("metrics endpoint: http://%s:%d/metrics (RDMX_METRICS_PORT)", host.c_str(), port);
    std::thread([this, fd, me] { serve(fd, me); }).detach();
  }

  static int listen_on(const std::string& host, int port, std::string& why) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* found = nullptr;
    if (port > 65535) {
      why = "the port is past 65535";
      return -1;
    }
    if (const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
      why = ::gai_strerror(rc);
      return -1;
    }
    int fd = -1;
    for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
      fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      const int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 16) != 0) {
        why = std::strerror(errno);
        ::close(fd);
        fd = -1;
      }
    }
    ::freeaddrinfo(found);
    return fd;
  }

  void serve(int listener, long pid) {
    // A fork's child inherits neither this thread nor the right to answer.
    while (static_cast<long>(::getpid()) == pid) {
      pollfd pfd{.fd = listener, .events = POLLIN, .revents = 0};
      if (::poll(&pfd, 1, 1000) <= 0) continue;
      const int client = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      answer(client);
      ::close(client);
    }
  }

  void answer(int client) {
    std::string request;
    char buffer[1024];
    while (request.find("\r\n\r\n") == std::string::npos && request.find("\n\n") == std::string::npos &&
           request.size() < kMaxRequestBytes) {
      pollfd pfd{.fd = client, .events = POLLIN, .revents = 0};
      if (::poll(&pfd, 1, kRequestTimeoutMs) <= 0) return;
      const ssize_t n = ::recv(client, buffer, sizeof(buffer), 0);
      if (n <= 0) return;
      request.append(buffer, static_cast<std::size_t>(n));
    }
    std::string status = "200 OK";
    std::string body;
    const std::string line = request.substr(0, request.find('\n'));
    if (line.rfind("GET /metrics ", 0) == 0 || line.rfind("GET /metrics?", 0) == 0 || line.rfind("GET / ", 0) == 0) {
      core::LockGuard lock(mutex_);
      std::vector<const MetricsSource*> live;
      for (const auto& entry : sources_) live.push_back(&entry.second);
      body = metrics_text(live, unix_ms_now());
    } else if (line.rfind("GET ", 0) == 0) {
      status = "404 Not Found";
      body = "rdmx serves its metrics at /metrics\n";
    } else {
      status = "405 Method Not Allowed";
      body = "GET /metrics\n";
    }
    const std::string response =
        "HTTP/1.1 " + status +
        "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\nConnection: close\r\n\r\n" + body;
    std::size_t sent = 0;
    while (sent < response.size()) {
      pollfd pfd{.fd = client, .events = POLLOUT, .revents = 0};
      if (::poll(&pfd, 1, kRequestTimeoutMs) <= 0) return;
      const ssize_t n = ::send(client, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return;
      sent += static_cast<std::size_t>(n);
    }
  }

  core::Mutex mutex_;
  std::vector<std::pair<std::uint64_t, MetricsSource>> sources_ RDMX_GUARDED_BY(mutex_);
  std::uint64_t next_id_ RDMX_GUARDED_BY(mutex_) = 1;
  long listener_pid_ RDMX_GUARDED_BY(mutex_) = 0;
};

}  // namespace

std::string metrics_text(const std::vector<const MetricsSource*>& sources, std::int64_t now_ms) {
  Exposition out;
  struct Row {
    const MetricsSource* source;
    std::map<CollOp, OperationTotals> totals;
    FlightRecorder::Snapshot snap;
  };
  std::vector<Row> rows;
  for (const MetricsSource* s : sources) rows.push_back({s, s->recorder->totals(), s->recorder->snapshot()});

  out.family("rdmx_collectives_total", "counter", "Collectives this rank has finished, by operation and outcome.");
  for (const Row& row : rows) {
    for (const auto& [op, total] : row.totals) {
      const std::string labels = base_labels(*row.source) + ",op=\"" + to_string(op) + "\"";
      out.sample("rdmx_collectives_total", labels + ",outcome=\"done\"", static_cast<double>(total.done));
      out.sample("rdmx_collectives_total", labels + ",outcome=\"failed\"", static_cast<double>(total.failed));
    }
  }
  out.family("rdmx_collective_bytes_total", "counter",
             "Bytes of the finished collectives, as nccl-tests counts them (the algorithm bandwidth's numerator).");
  for (const Row& row : rows) {
    for (const auto& [op, total] : row.totals) {
      out.sample("rdmx_collective_bytes_total", base_labels(*row.source) + ",op=\"" + to_string(op) + "\"",
                 static_cast<double>(total.bytes));
    }
  }
  out.family("rdmx_collective_seconds_total", "counter",
             "Seconds this rank spent inside the finished collectives, waiting for the others included.");
  for (const Row& row : rows) {
    for (const auto& [op, total] : row.totals) {
      out.sample("rdmx_collective_seconds_total", base_labels(*row.source) + ",op=\"" + to_string(op) + "\"",
                 total.seconds);
    }
  }
  out.family("rdmx_peer_sent_bytes_total", "counter", "Payload bytes this rank's collectives sent to each peer.");
  std::vector<std::pair<std::string, std::uint64_t>> received;
  for (const Row& row : rows) {
    if (!row.source->traffic) continue;
    for (int peer = 0; peer < row.source->who.size; ++peer) {
      if (peer == row.source->who.rank) continue;
      std::uint64_t sent = 0;
      std::uint64_t got = 0;
      row.source->traffic(peer, sent, got);
      const std::string labels = base_labels(*row.source) + ",peer=\"" + std::to_string(peer) + "\"";
      out.sample("rdmx_peer_sent_bytes_total", labels, static_cast<double>(sent));
      received.emplace_back(labels, got);
    }
  }
  out.family("rdmx_peer_received_bytes_total", "counter",
             "Payload bytes this rank's collectives received from each peer.");
  for (const auto& [labels, got] : received) out.sample("rdmx_peer_received_bytes_total", labels, got);
  out.family("rdmx_inside_collective", "gauge", "1 while this rank is inside a collective.");
  for (const Row& row : rows) out.sample("rdmx_inside_collective", base_labels(*row.source), row.snap.inside ? 1 : 0);
  out.family("rdmx_seconds_since_progress", "gauge",
             "Seconds since this rank entered its current collective or left its last one (0: none yet).");
  for (const Row& row : rows) {
    const double since = row.snap.since_ms == 0 ? 0.0 : static_cast<double>(now_ms - row.snap.since_ms) / 1e3;
    out.sample("rdmx_seconds_since_progress", base_labels(*row.source), since);
  }
  out.family("rdmx_communicator_ranks", "gauge", "Ranks in the communicator.");
  for (const Row& row : rows) out.sample("rdmx_communicator_ranks", base_labels(*row.source), row.source->who.size);
  return out.take();
}

std::shared_ptr<void> serve_metrics(MetricsSource source) {
  if (kMetricsPort.read() == 0 || !source.recorder) return nullptr;
  return MetricsServer::instance().add(std::move(source));
}

}  // namespace rdmx::coll
