// SPDX-License-Identifier: MIT
#include "support/verbs_util.hpp"
#include "services/race_annotations.hpp"

#include <signal.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "services/config.hpp"
#include "support/text.hpp"
#include "topo/topo.hpp"

namespace rdmx::test {
namespace {}  // namespace

bool has_rdma_device() { return !topo::scan_rdma_devices().devices.empty(); }

std::chrono::milliseconds default_timeout() { return rdmx::core::timeout(); }

// ---------------------------------------------------------------------------

char* map_anonymous(std::size_t bytes, void* at) {
  const int fixed = at != nullptr ? MAP_FIXED_NOREPLACE : 0;
  void* p = ::mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | fixed, -1, 0);
  CHECK(p != MAP_FAILED) << "mmap of " << bytes << " bytes: " << std::strerror(errno);
  CHECK(at == nullptr || p == at) << "mapping again at " << at << " gave " << p;
  core::release_remote_placements();  // the memory is a peer's to write once the test says so
  return static_cast<char*>(p);
}

int mappings_of(const char* name) {
  std::ifstream maps("/proc/self/maps");
  int count = 0;
  for (std::string line; std::getline(maps, line);) count += line.find(name) != std::string::npos;
  return count;
}

// ---------------------------------------------------------------------------

char process_state(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() ? line[close + 2] : '?';
}

StoppedProcess::StoppedProcess(pid_t pid) : pid_(pid) {
  CHECK_EQ(::kill(pid_, SIGSTOP), 0) << "SIGSTOP to pid " << pid_ << ": " << std::strerror(errno);
  CHECK(eventually([&] { return process_state(pid_) == 'T'; })) << "pid " << pid_ << " did not stop";
}

StoppedProcess::~StoppedProcess() { ::kill(pid_, SIGCONT); }

// ---------------------------------------------------------------------------

void publish_region(RankEnv& env, const std::string& key, const RemoteRegion& region) {
  std::ostringstream out;
  out << region.addr << " " << region.rkey << " " << region.length;
  env.store().set(key, std::string_view(out.str()));
}

void publish_region(RankEnv& env, const std::string& key, const MemoryRegion& mr) {
  publish_region(env, key, RemoteRegion{reinterpret_cast<std::uint64_t>(mr.addr()), mr.rkey(), mr.length()});
}

RemoteRegion fetch_region(RankEnv& env, const std::string& key) {
  std::istringstream in(env.store().get_string(key));
  RemoteRegion r;
  in >> r.addr >> r.rkey >> r.length;
  CHECK(!in.fail()) << "malformed region under store key " << key;
  return r;
}

void signal(RankEnv& env, const std::string& key, const std::string& value) {
  env.store().set(key, std::string_view(value));
}

std::string await(RankEnv& env, const std::string& key) { return env.store().get_string(key); }

// ---------------------------------------------------------------------------

Node::Node(RankEnv& env, std::size_t cq_depth)
    : device(env.device_ptr()),
      pd(device->alloc_pd()),
      send_cq(device->create_cq(cq_depth)),
      recv_cq(device->create_cq(cq_depth)) {}

std::unique_ptr<QueuePair> make_qp(Device& dev, ProtectionDomain& pd, CompletionQueue& send_cq,
                                   CompletionQueue& recv_cq, const QpCaps& caps) {
  auto qp = dev.create_qp(pd, send_cq, recv_cq, caps);
  CHECK(qp != nullptr) << "create_qp returned null";
  CHECK_EQ(qp->state(), QpState::Reset) << "a new QP must start in RESET";
  qp->init();
  CHECK_EQ(qp->state(), QpState::Init) << "init() must move the QP to INIT";
  return qp;
}

std::unique_ptr<QueuePair> make_qp(Node& node, const QpCaps& caps) {
  return make_qp(*node.device, *node.pd, *node.send_cq, *node.recv_cq, caps);
}

void connect_qp(RankEnv& env, QueuePair& qp, int peer, const std::string& tag, ConnectOptions options) {
  const std::string me = std::to_string(env.rank());
  const std::string them = std::to_string(peer);
  env.store().set(tag + "/qp/" + me + "->" + them, std::string_view(qp.local_address().to_hex()));
  std::string remote = env.store().get_string(tag + "/qp/" + them + "->" + me);
  options.peer_rank = peer;
  qp.connect(QpAddress::from_hex(remote), options);
  // The peer may already have sent something that fails this QP (a test of
  // an error, on a fast provider) by the time we look: ERROR is then a later
  // state, not a connect() that did nothing. Anything else must be RTS.
  const QpState state = qp.state();
  if (state == QpState::Error) {
    CHECK(!qp.error_reason().empty()) << "a QP in ERROR right after connect() must say why";
  } else {
    CHECK_EQ(state, QpState::Rts) << "connect() must move the QP to RTS";
  }
}

std::unique_ptr<QueuePair> connected_qp(RankEnv& env, Node& node, int peer, const std::string& tag, const QpCaps& caps,
                                        ConnectOptions options) {
  auto qp = make_qp(node, caps);
  connect_qp(env, *qp, peer, tag, options);
  return qp;
}

// ---------------------------------------------------------------------------

std::string describe(const WorkCompletion& wc) {
  std::ostringstream out;
  out << "{wr_id=" << wc.wr_id << " status=" << to_string(wc.status) << " opcode=" << to_string(wc.opcode)
      << " byte_len=" << wc.byte_len << " with_imm=" << (wc.with_imm ? "true" : "false")
      << " imm_data=" << hex(wc.imm_data) << " qp_num=" << wc.qp_num << "}";
  return out.str();
}

WorkCompletion wait_wc(CompletionQueue& cq, const std::string& what, const char* file, int line,
                       std::chrono::milliseconds timeout) {
  return wait_wcs(cq, 1, what, file, line, timeout).front();
}

std::vector<WorkCompletion> wait_wcs(CompletionQueue& cq, std::size_t n, const std::string& what, const char* file,
                                     int line, std::chrono::milliseconds timeout) {
  std::vector<WorkCompletion> out(n);
  std::size_t got = 0;
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + timeout;
  while (got < n) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) left = std::chrono::milliseconds(1);
    try {
      got += cq.wait(std::span<WorkCompletion>(out.data() + got, n - got), left);
    } catch (const Error& e) {
      std::ostringstream msg;
      msg << "waiting for " << what << ": got " << got << " of " << n << " completions, then cq.wait threw ("
          << to_string(e.code()) << ") after "
          << std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count()
          << " ms: " << e.what();
      if (got > 0) msg << "; last completion: " << describe(out[got - 1]);
      fail_rank(file, line, msg.str());
    }
    if (got < n && std::chrono::steady_clock::now() >= deadline) {
      fail_rank(file, line,
                "waiting for " + what + ": got " + std::to_string(got) + " of " + std::to_string(n) +
                    " completions within " + std::to_string(timeout.count()) + " ms");
    }
  }
  return out;
}

void check_no_wc(CompletionQueue& cq, const std::string& what, const char* file, int line) {
  WorkCompletion wc;
  std::size_t n = cq.poll(std::span<WorkCompletion>(&wc, 1));
  if (n != 0) fail_rank(file, line, what + ": expected no completion, got " + describe(wc));
}

void check_wc(const WorkCompletion& wc, const WcExpect& e, const std::string& what, const char* file, int line) {
  std::ostringstream bad;
  if (wc.wr_id != e.wr_id) bad << " wr_id " << wc.wr_id << " != expected " << e.wr_id << ";";
  if (wc.status != e.status) bad << " status " << to_string(wc.status) << " != expected " << to_string(e.status) << ";";
  if (e.opcode && wc.opcode != *e.opcode) {
    bad << " opcode " << to_string(wc.opcode) << " != expected " << to_string(*e.opcode) << ";";
  }
  if (e.byte_len && wc.byte_len != *e.byte_len)
    bad << " byte_len " << wc.byte_len << " != expected " << *e.byte_len << ";";
  if (e.qp_num && wc.qp_num != *e.qp_num) bad << " qp_num " << wc.qp_num << " != expected " << *e.qp_num << ";";
  if (e.with_imm && wc.with_imm != *e.with_imm) {
    bad << " with_imm " << (wc.with_imm ? "true" : "false") << " != expected " << (*e.with_imm ? "true" : "false")
        << ";";
  }
  if (e.imm_data && wc.imm_data != *e.imm_data) {
    bad << " imm_data " << hex(wc.imm_data) << " != expected " << hex(*e.imm_data) << ";";
  }
  if (!bad.str().empty()) fail_rank(file, line, what + ": wrong completion " + describe(wc) + ":" + bad.str());
}

bool eventually(const std::function<bool()>& ready, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (ready()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// ---------------------------------------------------------------------------

SendWr send_wr(std::uint64_t wr_id, Opcode opcode, std::span<const Sge> sges, bool signaled) {
  SendWr wr;
  wr.wr_id = wr_id;
  wr.opcode = opcode;
  wr.sg_list = sges;
  wr.signaled = signaled;
  return wr;
}

SendWr rdma_wr(std::uint64_t wr_id, Opcode opcode, std::span<const Sge> sges, std::uint64_t remote_addr,
               std::uint32_t rkey, bool signaled) {
  SendWr wr = send_wr(wr_id, opcode, sges, signaled);
  wr.remote_addr = remote_addr;
  wr.rkey = rkey;
  return wr;
}

WorkCompletion rdma_sync(QueuePair& qp, CompletionQueue& cq, Opcode opcode, const Sge& sge, std::uint64_t remote_addr,
                         std::uint32_t rkey, std::uint64_t wr_id, const char* file, int line) {
  qp.post_send(rdma_wr(wr_id, opcode, std::span<const Sge>(&sge, 1), remote_addr, rkey));
  return wait_wc(cq, std::string(to_string(opcode)) + " wr_id " + std::to_string(wr_id), file, line);
}

WorkCompletion atomic_sync(QueuePair& qp, CompletionQueue& cq, Opcode opcode, const Sge& result,
                           std::uint64_t remote_addr, std::uint32_t rkey, std::uint64_t compare_add, std::uint64_t swap,
                           std::uint64_t wr_id, const char* file, int line) {
  SendWr wr = rdma_wr(wr_id, opcode, std::span<const Sge>(&result, 1), remote_addr, rkey);
  wr.compare_add = compare_add;
  wr.swap = swap;
  qp.post_send(wr);
  return wait_wc(cq, std::string(to_string(opcode)) + " wr_id " + std::to_string(wr_id), file, line);
}

}  // namespace rdmx::test
