// SPDX-License-Identifier: MIT
// Helpers for tests that drive the verbs API inside a rank (see harness.hpp).
// Every helper reports problems with the rank's CHECK machinery, naming the
// caller's file:line where it matters.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rdmx/bootstrap.hpp"
#include "rdmx/verbs.hpp"
#include "support/buffer.hpp"
#include "support/harness.hpp"

namespace rdmx::test {

// RDMX_TIMEOUT (the bound of every blocking wait in rdmx).
std::chrono::milliseconds default_timeout();

// ---------------------------------------------------------------------------
// Fresh zeroed anonymous memory of its own mapping; with `at`, exactly there
// (MAP_FIXED_NOREPLACE: new pages at an address just unmapped), else the rank fails.
char* map_anonymous(std::size_t bytes, void* at = nullptr);
// Mappings in this process of memfds named `name` ("rdmx-region": regions
// from allocate_memory(), peers' included; "rdmx-heap-region": state pages).
int mappings_of(const char* name);

// ---------------------------------------------------------------------------
// Processes.
// The state letter of /proc/<pid>/stat ('T' stopped, 'S' sleeping, ...); '?' when unreadable.
char process_state(pid_t pid);
// `pid` stopped (SIGSTOP) for as long as this lives, then continued
// (SIGCONT) however the rank leaves the scope; the constructor returns once
// the process is stopped, else the rank fails.
class StoppedProcess {
 public:
  explicit StoppedProcess(pid_t pid);
  ~StoppedProcess();
  StoppedProcess(const StoppedProcess&) = delete;
  StoppedProcess& operator=(const StoppedProcess&) = delete;

 private:
  pid_t pid_;
};

// ---------------------------------------------------------------------------
// A remote region as exchanged between ranks.
struct RemoteRegion {
  std::uint64_t addr = 0;
  std::uint32_t rkey = 0;
  std::uint64_t length = 0;
};
// Whether this host has an RDMA device (a real HCA or soft-RoCE): the verbs cases need one.
bool has_rdma_device();

void publish_region(RankEnv& env, const std::string& key, const MemoryRegion& mr);
void publish_region(RankEnv& env, const std::string& key, const RemoteRegion& region);
RemoteRegion fetch_region(RankEnv& env, const std::string& key);

// Store conveniences.
void signal(RankEnv& env, const std::string& key, const std::string& value = "1");
std::string await(RankEnv& env, const std::string& key);  // blocking get (RDMX_TIMEOUT)

// ---------------------------------------------------------------------------
// One rank's verbs objects. Members are destroyed in reverse order, as the API
// requires; declare memory regions and QPs after the Node that owns their PD/CQs.
struct Node {
  explicit Node(RankEnv& env, std::size_t cq_depth = 4096);
  std::shared_ptr<Device> device;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<CompletionQueue> send_cq;
  std::unique_ptr<CompletionQueue> recv_cq;
};

// create_qp + init().
std::unique_ptr<QueuePair> make_qp(Node& node, const QpCaps& caps = {});
std::unique_ptr<QueuePair> make_qp(Device& dev, ProtectionDomain& pd, CompletionQueue& send_cq,
                                   CompletionQueue& recv_cq, const QpCaps& caps = {});
// Publishes qp's address under "<tag>/qp/<me>-><peer>", reads the peer's
// "<tag>/qp/<peer>-><me>" and connects. Receives posted before this call are
// in place before the peer can send (the peer needs our address first).
void connect_qp(RankEnv& env, QueuePair& qp, int peer, const std::string& tag, ConnectOptions options = {});
// make_qp + connect_qp.
std::unique_ptr<QueuePair> connected_qp(RankEnv& env, Node& node, int peer, const std::string& tag,
                                        const QpCaps& caps = {}, ConnectOptions options = {});

// ---------------------------------------------------------------------------
// Completions.
std::string describe(const WorkCompletion& wc);
// Waits for exactly one completion (fails the rank on timeout, naming `what`).
WorkCompletion wait_wc(CompletionQueue& cq, const std::string& what, const char* file, int line,
                       std::chrono::milliseconds timeout = default_timeout());
#define WAIT_WC(cq, what) ::rdmx::test::wait_wc((cq), (what), __FILE__, __LINE__)
// Waits for `n` completions in total.
std::vector<WorkCompletion> wait_wcs(CompletionQueue& cq, std::size_t n, const std::string& what, const char* file,
                                     int line, std::chrono::milliseconds timeout = default_timeout());
#define WAIT_WCS(cq, n, what) ::rdmx::test::wait_wcs((cq), (n), (what), __FILE__, __LINE__)
// Fails the rank when the CQ holds a completion.
void check_no_wc(CompletionQueue& cq, const std::string& what, const char* file, int line);
#define CHECK_NO_WC(cq, what) ::rdmx::test::check_no_wc((cq), (what), __FILE__, __LINE__)

// Checks wr_id, status and (when given) opcode, byte_len and qp_num of a completion.
struct WcExpect {
  std::uint64_t wr_id = 0;
  WcStatus status = WcStatus::Success;
  std::optional<WcOpcode> opcode;
  std::optional<std::uint32_t> byte_len;
  std::optional<std::uint32_t> qp_num;
  std::optional<bool> with_imm;
  std::optional<std::uint32_t> imm_data;
};
void check_wc(const WorkCompletion& wc, const WcExpect& expect, const std::string& what, const char* file, int line);
#define CHECK_WC(wc, what, ...) \
  ::rdmx::test::check_wc((wc), ::rdmx::test::WcExpect{__VA_ARGS__}, (what), __FILE__, __LINE__)

// Polls `ready` until it holds or `timeout` passes (for conditions nothing can
// block on, e.g. a QP's state); returns whether it held.
bool eventually(const std::function<bool()>& ready, std::chrono::milliseconds timeout = default_timeout());

// ---------------------------------------------------------------------------
// Work request builders.
SendWr send_wr(std::uint64_t wr_id, Opcode opcode, std::span<const Sge> sges, bool signaled = true);
SendWr rdma_wr(std::uint64_t wr_id, Opcode opcode, std::span<const Sge> sges, std::uint64_t remote_addr,
               std::uint32_t rkey, bool signaled = true);
// Posts one RDMA op and waits for its completion; returns it.
WorkCompletion rdma_sync(QueuePair& qp, CompletionQueue& cq, Opcode opcode, const Sge& sge, std::uint64_t remote_addr,
                         std::uint32_t rkey, std::uint64_t wr_id, const char* file, int line);
#define RDMA_SYNC(qp, cq, opcode, sge, raddr, rkey, wr_id) \
  ::rdmx::test::rdma_sync((qp), (cq), (opcode), (sge), (raddr), (rkey), (wr_id), __FILE__, __LINE__)
// Posts one atomic and waits for it; returns the completion (the old value is
// in the 8 bytes at sge.addr).
WorkCompletion atomic_sync(QueuePair& qp, CompletionQueue& cq, Opcode opcode, const Sge& result,
                           std::uint64_t remote_addr, std::uint32_t rkey, std::uint64_t compare_add, std::uint64_t swap,
                           std::uint64_t wr_id, const char* file, int line);
#define ATOMIC_SYNC(qp, cq, opcode, sge, raddr, rkey, compare_add, swap, wr_id)                                     \
  ::rdmx::test::atomic_sync((qp), (cq), (opcode), (sge), (raddr), (rkey), (compare_add), (swap), (wr_id), __FILE__, \
                            __LINE__)

}  // namespace rdmx::test
