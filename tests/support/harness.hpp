// SPDX-License-Identifier: MIT
// Multi-process test harness: runs N ranks as real forked processes.
//
//   TEST(Example, Exchange) {
//     ASSERT_TRUE(rdmx::test::run_ranks(2, Placement::Local, [](RankEnv& env) {
//       env.store().set("hello/" + std::to_string(env.rank()), "x");
//       CHECK_EQ(env.store().get_string("hello/" + std::to_string(1 - env.rank())), "x");
//     }));
//   }
//
// Every rank is a child process forked from the (single-threaded) gtest
// process. A child opens its own device (env.device()) after it has entered
// its network namespace, and shares a file store (env.store()) in a per-run
// temporary directory with the other ranks. gtest assertions do not cross
// fork(): inside a rank use the CHECK macros below (or throw); a failed CHECK
// prints "rank R: file:line: message", records it and ends the child with
// _exit(1). run_ranks() waits for all children under one deadline, SIGKILLs
// every child still running when it passes (naming the ranks that hung), and
// returns an AssertionResult carrying each failed rank's message.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "rdmx/bootstrap.hpp"
#include "rdmx/error.hpp"
#include "rdmx/verbs.hpp"

namespace rdmx::test {

// Where the ranks run.
//   Local:      every rank in the test's own network namespace, on loopback
//               (RDMX_SOCKET_IFNAME=lo).
//   NetNsIPv4:  rank 0 in namespace A, every other rank in namespace B; A and B
//               are joined by a veth pair (10.201.0.1/24 <-> 10.201.0.2/24).
//               RDMX_SOCKET_IFNAME=<veth>, RDMX_SOCKET_FAMILY=AF_INET.
//   NetNsIPv6:  the same namespaces, fd00:201::1/64 <-> fd00:201::2/64 (nodad),
//               RDMX_SOCKET_FAMILY=AF_INET6.
// Network namespaces need root; without it run_ranks() fails (never skips).
enum class Placement { Local, NetNsIPv4, NetNsIPv6 };
const char* to_string(Placement placement) noexcept;
inline bool is_netns(Placement placement) noexcept { return placement != Placement::Local; }
inline void PrintTo(Placement placement, std::ostream* os) { *os << to_string(placement); }

struct Options {
  std::string provider = "tcp";               // what env.device() opens
  std::chrono::milliseconds timeout{60'000};  // whole run, all ranks together
  std::vector<int> may_be_killed;             // ranks the test kills with SIGKILL on purpose
  // Once a rank has failed, how long the others get to finish (or report
  // their own failure) before they are killed.
  std::chrono::milliseconds failure_grace{3'000};
};

// What a rank sees. Only valid inside the child.
class RankEnv {
 public:
  RankEnv(int rank, int world_size, Placement placement, std::string provider, std::string dir, std::string ifname,
          std::string ip);
  ~RankEnv();
  RankEnv(const RankEnv&) = delete;
  RankEnv& operator=(const RankEnv&) = delete;

  int rank() const noexcept { return rank_; }
  int world_size() const noexcept { return world_size_; }
  Placement placement() const noexcept { return placement_; }
  const std::string& provider() const noexcept { return provider_; }
  // The run's temporary directory, shared by all ranks and removed afterwards.
  const std::string& dir() const noexcept { return dir_; }
  // The interface this rank's provider is told to use ("lo" or a veth) and
  // this rank's address on it ("127.0.0.1", "10.201.0.2", "fd00:201::1").
  const std::string& ifname() const noexcept { return ifname_; }
  const std::string& ip() const noexcept { return ip_; }

  // The shared file store (opened on first use).
  Store& store();
  std::shared_ptr<Store> store_ptr();
  // This rank's device, opened on first use with Options::provider.
  Device& device();
  std::shared_ptr<Device> device_ptr();

  // Every rank must call barrier() the same number of times in the same order.
  void barrier(const std::string& name = "barrier");
  // Ends this process with SIGKILL (for tests of dead peers; the rank must be
  // listed in Options::may_be_killed).
  [[noreturn]] void kill_self();

 private:
  int rank_;
  int world_size_;
  Placement placement_;
  std::string provider_;
  std::string dir_;
  std::string ifname_;
  std::string ip_;
  std::shared_ptr<Store> store_;
  std::shared_ptr<Device> device_;
  int barriers_ = 0;
};

using RankBody = std::function<void(RankEnv&)>;

// The whole of a file ("" when it cannot be read), e.g. a rank's log.
std::string read_file(const std::string& path);

// Sends this process's stderr (where rdmx logs) to the end of `path`, so a
// rank's log can be read back with read_file(); a CHECK fails when it cannot.
void log_to_file(const std::string& path);

// Runs `body` in `n` forked ranks and waits for all of them. Succeeds when
// every rank returned normally (or, for ranks in may_be_killed, died by
// SIGKILL). Must be called from a single-threaded process.
::testing::AssertionResult run_ranks(int n, Placement placement, const RankBody& body, const Options& options = {});

// The network namespaces used by the NetNs placements, created on first use in
// this process and deleted by destroy() (called from the suites'
// TearDownTestSuite and at exit). Namespace names carry the pid, so test
// processes running in parallel do not collide; namespaces left by a killed
// test process are removed the next time one is created.
class NetNsPair {
 public:
  // Creates the pair if needed. Throws std::runtime_error explaining why it
  // cannot (not root, `ip` missing, a command failed).
  static const NetNsPair& get();
  static void destroy() noexcept;

  std::string ns[2];      // namespace names (in /var/run/netns)
  std::string ifname[2];  // veth end inside ns[i]
  std::string ipv4[2];
  std::string ipv6[2];
  // Namespace index of a rank: 0 for rank 0, 1 for every other rank.
  static int index_of(int rank) noexcept { return rank == 0 ? 0 : 1; }
};

// ---------------------------------------------------------------------------
// Failure reporting inside a rank.

// Prints "rank R: file:line: message" to stderr, records it for the parent and
// ends the process with _exit(1).
[[noreturn]] void fail_rank(const char* file, int line, const std::string& message);
// Rank of this process (-1 in the parent).
int current_rank() noexcept;

// While alive, adds `describe()` to any failure this rank reports, e.g.
//   ScopedTrace trace([&] { return "qp state " + std::string(to_string(qp->state())); });
class ScopedTrace {
 public:
  explicit ScopedTrace(std::function<std::string()> describe);
  ~ScopedTrace();
  ScopedTrace(const ScopedTrace&) = delete;
  ScopedTrace& operator=(const ScopedTrace&) = delete;
};

class FailStream {
 public:
  FailStream(const char* file, int line) : file_(file), line_(line) {}
  FailStream(const FailStream&) = delete;
  FailStream& operator=(const FailStream&) = delete;
  ~FailStream() noexcept(false) { fail_rank(file_, line_, out_.str()); }
  template <class T>
  FailStream& operator<<(const T& value) {
    out_ << value;
    return *this;
  }

 private:
  const char* file_;
  int line_;
  std::ostringstream out_;
};

// Renders a value for a failure message: rdmx enums by name, integers in
// decimal (and hex when large), strings quoted.
template <class T>
std::string show(const T& value) {
  using D = std::remove_cvref_t<T>;
  if constexpr (std::is_same_v<D, bool>) {
    return value ? "true" : "false";
  } else if constexpr (std::is_same_v<D, WcStatus> || std::is_same_v<D, WcOpcode> || std::is_same_v<D, Opcode> ||
                       std::is_same_v<D, QpState> || std::is_same_v<D, ErrorCode> || std::is_same_v<D, PostResult>) {
    return to_string(value);
  } else if constexpr (std::is_integral_v<D>) {
    std::ostringstream out;
    if constexpr (sizeof(D) == 1) {
      out << static_cast<int>(value);
    } else {
      out << value;
    }
    bool large;
    if constexpr (std::is_signed_v<D>) {
      large = value > 9 || value < -9;
    } else {
      large = value > 9u;
    }
    if (large) out << " (0x" << std::hex << static_cast<std::uint64_t>(value) << ")";
    return out.str();
  } else if constexpr (std::is_convertible_v<const D&, std::string_view>) {
    return "\"" + std::string(std::string_view(value)) + "\"";
  } else if constexpr (requires(std::ostream & os, const D& v) { os << v; }) {
    std::ostringstream out;
    out << value;
    return out.str();
  } else {
    return "<unprintable>";
  }
}

template <class A, class B>
bool values_equal(const A& a, const B& b) {
  if constexpr (std::is_integral_v<A> && std::is_integral_v<B> && !std::is_same_v<A, bool> &&
                !std::is_same_v<B, bool>) {
    return std::cmp_equal(a, b);
  } else {
    return a == b;
  }
}
template <class A, class B>
bool values_less(const A& a, const B& b) {
  if constexpr (std::is_integral_v<A> && std::is_integral_v<B>) {
    return std::cmp_less(a, b);
  } else {
    return a < b;
  }
}

template <class A, class B, class Cmp>
std::optional<std::string> check_op(const A& a, const B& b, Cmp cmp, const char* ea, const char* op, const char* eb) {
  if (cmp(a, b)) return std::nullopt;
  return std::string("CHECK(") + ea + " " + op + " " + eb + ") failed: " + show(a) + " vs " + show(b);
}

// Runs `fn`, which must throw rdmx::Error with `code`; returns that error.
// Fails the rank (naming `what`) otherwise.
Error expect_error(ErrorCode code, const std::function<void()>& fn, const char* what, const char* file, int line);

}  // namespace rdmx::test

#if defined(CHECK) || defined(CHECK_EQ)
#error "tests/support/harness.hpp: CHECK macros already defined"
#endif

// CHECK(cond) << "more context";
#define CHECK(cond) \
  switch (0)        \
  case 0:           \
  default:          \
    if (cond) {     \
    } else          \
      ::rdmx::test::FailStream(__FILE__, __LINE__) << "CHECK(" #cond ") failed. "

#define RDMX_TEST_CHECK_OP_(a, b, op, cmp)                                                            \
  switch (0)                                                                                          \
  case 0:                                                                                             \
  default:                                                                                            \
    if (auto rdmx_check_msg_ = ::rdmx::test::check_op((a), (b), cmp, #a, op, #b); !rdmx_check_msg_) { \
    } else                                                                                            \
      ::rdmx::test::FailStream(__FILE__, __LINE__) << *rdmx_check_msg_ << ". "

#define CHECK_EQ(a, b) \
  RDMX_TEST_CHECK_OP_(a, b, "==", [](const auto& x, const auto& y) { return ::rdmx::test::values_equal(x, y); })
#define CHECK_NE(a, b) \
  RDMX_TEST_CHECK_OP_(a, b, "!=", [](const auto& x, const auto& y) { return !::rdmx::test::values_equal(x, y); })
#define CHECK_LT(a, b) \
  RDMX_TEST_CHECK_OP_(a, b, "<", [](const auto& x, const auto& y) { return ::rdmx::test::values_less(x, y); })
#define CHECK_LE(a, b) \
  RDMX_TEST_CHECK_OP_(a, b, "<=", [](const auto& x, const auto& y) { return !::rdmx::test::values_less(y, x); })
#define CHECK_GT(a, b) \
  RDMX_TEST_CHECK_OP_(a, b, ">", [](const auto& x, const auto& y) { return ::rdmx::test::values_less(y, x); })
#define CHECK_GE(a, b) \
  RDMX_TEST_CHECK_OP_(a, b, ">=", [](const auto& x, const auto& y) { return !::rdmx::test::values_less(x, y); })

// auto err = EXPECT_RDMX_ERROR(rdmx::ErrorCode::InvalidArgument, qp->post_send(wr));
#define EXPECT_RDMX_ERROR(code, stmt) ::rdmx::test::expect_error((code), [&]() { stmt; }, #stmt, __FILE__, __LINE__)

// Unconditional failure: FAIL_RANK() << "why";
#define FAIL_RANK() ::rdmx::test::FailStream(__FILE__, __LINE__)
