// SPDX-License-Identifier: MIT
// What the shm provider and auto selection promise beyond the conformance
// suite: nothing left behind by a killed process, the provider chosen per
// peer, and atomics that stay atomic whichever provider carries them.
#include <dirent.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "providers/shm/address.hpp"
#include "support/harness.hpp"
#include "support/verbs_util.hpp"

namespace rdmx::test {
namespace {

std::set<std::string> list_dir(const std::string& dir) {
  std::set<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) names.insert(e->d_name);
    ::closedir(d);
  }
  return names;
}

// Whether a process has exited: no such pid, or a zombie not reaped yet.
bool process_exited(int pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && (line[close + 2] == 'Z' || line[close + 2] == 'X');
}

// Rank 1 is SIGKILLed while rank 0 streams WRITEs into it. Segments are
// memfds, so /dev/shm gains nothing; the dead process's socket file is
// removed by the next shm device opened on the host.
TEST(ShmProvider, SigkillLeavesNothingBehind) {
  const std::set<std::string> dev_shm_before = list_dir("/dev/shm");
  Options options;
  options.provider = "shm";
  options.may_be_killed = {1};
  ASSERT_TRUE(run_ranks(
      2, Placement::Local,
      [](RankEnv& env) {
        Node node(env);
        Buffer buf(1 << 20);
        auto mr = node.pd->register_memory(buf.data(), buf.size(), Access::LocalWrite | Access::RemoteWrite);
        auto qp = connected_qp(env, node, 1 - env.rank(), "k");
        if (env.rank() == 1) {
          publish_region(env, "region", *mr);
          signal(env, "socket", env.device().name().substr(4));  // "shm:<path>"
          await(env, "streaming");
          env.kill_self();
        }
        RemoteRegion r = fetch_region(env, "region");
        Sge sge = mr->sge(0, 1 << 20);
        signal(env, "streaming");
        // WRITE until one fails: the peer dies while we stream.
        bool failed = false;
        for (int i = 0; i < 100000 && !failed; ++i) {
          qp->post_send(rdma_wr(static_cast<std::uint64_t>(i), Opcode::RdmaWrite, {&sge, 1}, r.addr, r.rkey));
          failed = WAIT_WC(*node.send_cq, "a WRITE to a peer that gets killed").status != WcStatus::Success;
        }
        CHECK(failed) << "100000 WRITEs to a killed peer succeeded";
        const std::string dead_socket = await(env, "socket");
        // The socket's end of file can arrive while the kernel is still tearing
        // the process down; the sweep needs it gone (or a zombie) first.
        const std::string file = dead_socket.substr(dead_socket.rfind('/') + 1);
        const int dead_pid = std::stoi(file.substr(0, file.find('-')));
        CHECK(eventually([&] { return process_exited(dead_pid); })) << "rank 1 (pid " << dead_pid << ") did not exit";
        // A new device on this host sweeps sockets whose process is gone.
        auto fresh = open_device("shm");
        struct stat st {};
        CHECK_NE(::stat(dead_socket.c_str(), &st), 0)
            << "the killed rank's socket " << dead_socket << " is still there";
      },
      options));
  const std::set<std::string> dev_shm_after = list_dir("/dev/shm");
  for (const auto& name : dev_shm_after) {
    EXPECT_TRUE(dev_shm_before.contains(name)) << "/dev/shm/" << name << " appeared during the test";
  }
}

// A peer's device with too many connections waiting for their QP closes new
// ones without a reply and expects the initiator to come back: the QP
// connects again (until RDMX_TIMEOUT) rather than failing at the first close.
TEST(ShmProvider, AHandshakeClosedUnansweredIsTriedAgain) {
  Options options;
  options.provider = "shm";
  ASSERT_TRUE(run_ranks(
      1, Placement::Local,
      [](RankEnv& env) {
        // A listener that closes every connection unanswered, as a full device does.
        const std::string path = env.dir() + "/full.sock";
        const int listener = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
        CHECK_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
        CHECK_EQ(::listen(listener, 16), 0) << std::strerror(errno);
        std::atomic<int> closed{0};
        std::atomic<bool> stop{false};
        std::thread full([&] {
          while (!stop.load()) {
            pollfd p{listener, POLLIN, 0};
            if (::poll(&p, 1, 20) <= 0) continue;
            const int c = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
            if (c < 0) continue;
            ::close(c);
            closed.fetch_add(1);
          }
        });
        auto device = open_device("shm");
        auto pd = device->alloc_pd();
        auto cq = device->create_cq(16);
        auto qp = make_qp(*device, *pd, *cq, *cq);
        shm::ShmAddress peer;
        peer.boot_id = shm::HostIdentity::self().boot_id;
        peer.pid_namespace = shm::HostIdentity::self().pid_namespace;
        peer.pid = static_cast<std::uint32_t>(::getpid());
        // The side with the lower (nonce, qp number) connects.
        peer.qpn = 1;
        peer.nonce = ~std::uint64_t{0};
        peer.socket_path = path;
        qp->connect(peer.encode());
        Buffer buf(64);
        auto mr = pd->register_memory(buf.data(), buf.size(), Access::LocalWrite);
        Sge sge = mr->sge(0, 8);
        qp->post_send(send_wr(1, Opcode::Send, {&sge, 1}));
        const bool again = eventually([&] { return closed.load() >= 3 || qp->state() == QpState::Error; },
                                      std::chrono::milliseconds(10000));
        CHECK(again && closed.load() >= 3) << "the QP connected " << closed.load() << " time(s); state "
                                           << to_string(qp->state()) << ": " << qp->error_reason();
        CHECK(qp->state() != QpState::Error) << qp->error_reason();
        stop.store(true);
        full.join();
        ::close(listener);
      },
      options));
}

// With the default ("auto") device, peers on this host are reached through shm.
TEST(AutoSelection, SameHostPeersUseShm) {
  Options options;
  options.provider = "auto";
  ASSERT_TRUE(run_ranks(
      2, Placement::Local,
      [](RankEnv& env) {
        Node node(env);
        CHECK_EQ(node.device->provider(), std::string("auto"));
        auto qp = connected_qp(env, node, 1 - env.rank(), "a");
        CHECK_EQ(qp->provider(), std::string("shm")) << "a peer on this host must be reached through shm";
        // What the link can do is shm's, not the least of the candidates'.
        CHECK(!qp->device_caps().direct_registered_writes) << "shm copies WRITEs into heap memory across processes";
        CHECK(!qp->device_caps().remote_peers) << "device_caps() of an auto QP that chose shm";
        env.barrier("done");
      },
      options));
}

// Ranks whose shm sockets cannot see each other (a private mount of the
// socket directory, as containers on one host have) are reached through tcp,
// and both sides agree without talking first.
TEST(AutoSelection, PeersThatCannotShareMemoryUseTcp) {
  Options options;
  options.provider = "auto";
  ASSERT_TRUE(run_ranks(
      2, Placement::Local,
      [](RankEnv& env) {
        const std::string dir = env.dir() + "/sockets";
        ::mkdir(dir.c_str(), 0700);
        CHECK_EQ(::unshare(CLONE_NEWNS), 0) << "unshare(CLONE_NEWNS) needs root";
        CHECK_EQ(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0);
        CHECK_EQ(::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=1m"), 0) << "mounting a private socket directory";
        ::setenv("RDMX_SHM_DIR", dir.c_str(), 1);
        Node node(env);
        auto qp = connected_qp(env, node, 1 - env.rank(), "a");
        CHECK_EQ(qp->provider(), std::string("tcp")) << "the peer's shm socket is invisible here";
        // The QP chose a later candidate than the first (shm), which it let go.
        const QpCaps caps = qp->caps();
        CHECK_GE(caps.max_send_wr, 1u) << "caps() of an auto QP that chose tcp";
        CHECK(qp->device_caps().direct_registered_writes) << "device_caps() of an auto QP that chose tcp";
        CHECK(!node.device->caps().direct_registered_writes) << "auto claims what only some candidates do";
        Buffer buf(4096);
        auto mr = node.pd->register_memory(buf.data(), buf.size(), Access::LocalWrite | Access::RemoteWrite);
        publish_region(env, "r" + std::to_string(env.rank()), *mr);
        RemoteRegion peer = fetch_region(env, "r" + std::to_string(1 - env.rank()));
        fill_pattern(buf.data(), 64, 7);
        Sge sge = mr->sge(0, 64);
        CHECK_WC(RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, sge, peer.addr + 1024, peer.rkey, 1),
                 "WRITE over the chosen tcp QP", .wr_id = 1, .status = WcStatus::Success);
        env.barrier("written");
        CHECK_PATTERN(buf.data() + 1024, 64, 7, 0, "WRITE from the peer over tcp");
        env.barrier("done");
      },
      options));
}

// Rank 0 (auto) takes FETCH_ADDs from a tcp-only rank and a shm-only rank,
// and adds locally with CPU atomics, all on one word: the total is exact.
TEST(AutoSelection, AtomicsFromEveryProviderAreAtomicTogether) {
  Options options;
  options.provider = "auto";
  ASSERT_TRUE(run_ranks(
      3, Placement::Local,
      [](RankEnv& env) {
        constexpr int kOps = 2000;
        if (env.rank() == 0) {
          Node node(env);
          Buffer counter(4096);
          auto mr = node.pd->register_memory(counter.data(), counter.size(), Access::LocalWrite | Access::RemoteAtomic);
          auto q1 = connected_qp(env, node, 1, "t");
          auto q2 = connected_qp(env, node, 2, "s");
          CHECK_EQ(q1->provider(), std::string("tcp")) << "rank 1 offers only tcp";
          CHECK_EQ(q2->provider(), std::string("shm")) << "rank 2 offers only shm";
          publish_region(env, "counter", RemoteRegion{counter.addr(0), mr->rkey(), 8});
          std::atomic_ref<std::uint64_t> word(*counter.u64(0));
          for (int i = 0; i < kOps; ++i) word.fetch_add(1);
          env.barrier("added");
          CHECK_EQ(word.load(), 3u * kOps) << "atomics from tcp, shm and the CPU lost an update";
          return;
        }
        auto device = open_device(env.rank() == 1 ? "tcp" : "shm");
        auto pd = device->alloc_pd();
        auto cq = device->create_cq(4096);
        Buffer result(4096);
        auto mr = pd->register_memory(result.data(), result.size(), Access::LocalWrite);
        auto qp = make_qp(*device, *pd, *cq, *cq);
        connect_qp(env, *qp, 0, env.rank() == 1 ? "t" : "s");
        RemoteRegion c = fetch_region(env, "counter");
        for (int i = 0; i < kOps; ++i) {
          ATOMIC_SYNC(*qp, *cq, Opcode::AtomicFetchAdd, mr->sge(0, 8), c.addr, c.rkey, 1, 0,
                      static_cast<std::uint64_t>(i));
        }
        env.barrier("added");
      },
      options));
}

}  // namespace
}  // namespace rdmx::test
