// SPDX-License-Identifier: MIT
// rdmx_store: a standalone TCP store server, for jobs whose rank 0 should not
// serve the store itself (e.g. the store host runs no rank).
//
//   rdmx_store --host 0.0.0.0 --port 29500
//   (on every rank) export RDMX_STORE=<that host>:29500
//
// Serves until SIGINT or SIGTERM.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "rdmx/bootstrap.hpp"

namespace {

void usage(FILE* out) {
  std::fprintf(out,
               "usage: rdmx_store [--host HOST] [--port PORT]\n"
               "  Serves an rdmx TCP store until SIGINT/SIGTERM.\n"
               "  --host HOST  address to listen on (default: all interfaces, IPv6 and IPv4)\n"
               "  --port PORT  port to listen on (default 29500; 0 picks a free one)\n"
               "Ranks then use RDMX_STORE=<this host>:<port>.\n");
}

bool parse_port(const char* text, std::uint16_t& port) {
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < 0 || value > 65535) return false;
  port = static_cast<std::uint16_t>(value);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string host;
  std::uint16_t port = 29500;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      usage(stdout);
      return 0;
    }
    if ((arg == "--host" || arg == "--port") && i + 1 >= argc) {
      std::fprintf(stderr, "rdmx_store: %s needs a value\n", arg.c_str());
      usage(stderr);
      return 2;
    }
    if (arg == "--host") {
      host = argv[++i];
    } else if (arg == "--port") {
      if (!parse_port(argv[++i], port)) {
        std::fprintf(stderr, "rdmx_store: --port \"%s\" is not a port number (0..65535)\n", argv[i]);
        return 2;
      }
    } else {
      std::fprintf(stderr, "rdmx_store: unknown argument \"%s\"\n", arg.c_str());
      usage(stderr);
      return 2;
    }
  }

  // Block the stop signals before the server thread starts, so that only
  // sigwait() below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  try {
    rdmx::TcpStoreServer server(host, port);
    std::string shown = host.empty() ? std::string("*") : host;
    if (shown.find(':') != std::string::npos && shown.front() != '[') shown = "[" + shown + "]";
    std::printf("rdmx_store: serving on %s:%u (ranks: export RDMX_STORE=<this host>:%u)\n", shown.c_str(),
                static_cast<unsigned>(server.port()), static_cast<unsigned>(server.port()));
    std::fflush(stdout);
    int received = 0;
    sigwait(&stop_signals, &received);
    std::printf("rdmx_store: %s received, stopping\n", received == SIGINT ? "SIGINT" : "SIGTERM");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rdmx_store: %s\n", e.what());
    return 1;
  }
  return 0;
}
