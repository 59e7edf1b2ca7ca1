// SPDX-License-Identifier: MIT
// A peer held inside a copy. One stopped while it copies a SEND's payload
// out of this process (a cross-memory request): the sender's QP fails at
// once, without waiting for a copy that a stopped process never ends, and
// the peer, once continued, delivers nothing of a payload that may have
// changed after the flush. One inside a WRITE into memory this process
// allocated: the region's deregistration does not wait for it, and the
// WRITE, once it goes on, reaches nothing this process uses.
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "support/harness.hpp"
#include "support/verbs_util.hpp"

namespace rdmx::test {
namespace {

constexpr int kReceiver = 0;
constexpr int kSender = 1;
constexpr std::size_t kCopyLen = 4 << 20;  // far above the eager limit: the receiver copies it across processes

// Pages of [addr, addr + len) that are not there yet: the first access to
// one, the peer's cross-memory copy included, waits until this process
// provides it. That makes "the peer is inside its copy" a state the test
// can wait for instead of a race it hopes to win.
class MissingPages {
 public:
  MissingPages(char* addr, std::size_t len) : addr_(addr), len_(len) {
    CHECK_EQ(::madvise(addr_, len_, MADV_DONTNEED), 0) << "madvise: " << std::strerror(errno);
    fd_ = static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
    CHECK_GE(fd_, 0) << "userfaultfd: " << std::strerror(errno);
    uffdio_api api{};
    api.api = UFFD_API;
    CHECK_EQ(::ioctl(fd_, UFFDIO_API, &api), 0) << "UFFDIO_API: " << std::strerror(errno);
    uffdio_register reg{};
    reg.range = {reinterpret_cast<std::uint64_t>(addr_), len_};
    reg.mode = UFFDIO_REGISTER_MODE_MISSING;
    CHECK_EQ(::ioctl(fd_, UFFDIO_REGISTER, &reg), 0) << "UFFDIO_REGISTER: " << std::strerror(errno);
  }
  ~MissingPages() { ::close(fd_); }
  MissingPages(const MissingPages&) = delete;
  MissingPages& operator=(const MissingPages&) = delete;

  // Waits for a first access to a missing page.
  bool wait_for_access() {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(default_timeout().count())) != 1) return false;
    uffd_msg message{};
    return ::read(fd_, &message, sizeof message) == static_cast<ssize_t>(sizeof message) &&
           message.event == UFFD_EVENT_PAGEFAULT;
  }
  // Provides every page, filled with `byte`, and wakes the access waiting.
  void fill(std::uint8_t byte) {
    std::vector<char> pages(len_, static_cast<char>(byte));
    uffdio_copy copy{};
    copy.dst = reinterpret_cast<std::uint64_t>(addr_);
    copy.src = reinterpret_cast<std::uint64_t>(pages.data());
    copy.len = len_;
    CHECK_EQ(::ioctl(fd_, UFFDIO_COPY, &copy), 0) << "UFFDIO_COPY: " << std::strerror(errno);
  }

 private:
  char* addr_;
  std::size_t len_;
  int fd_ = -1;
};

TEST(ShmProvider, APeerStoppedInsideACopyOutOfThisProcessDoesNotHoldItsError) {
  Options options;
  options.provider = "shm";
  ASSERT_TRUE(run_ranks(
      2, Placement::Local,
      [](RankEnv& env) {
        Node node(env);
        if (env.rank() == kReceiver) {
          Buffer buf(kCopyLen);
          set_bytes(buf.data(), 0, kCopyLen);
          auto mr = node.pd->register_memory(buf.data(), kCopyLen, Access::LocalWrite);
          auto qp = make_qp(node);
          const Sge sge = mr->sge(0, kCopyLen);
          qp->post_recv(RecvWr{.wr_id = 7, .sg_list = {&sge, 1}});
          connect_qp(env, *qp, kSender, "s");
          signal(env, "pid", std::to_string(::getpid()));
          await(env, "continued");  // stopped inside the copy and continued meanwhile
          // The receive must not complete with a payload its sender may have
          // changed. A SEND of ours makes the QP say what it has: the receive
          // comes back flushed, never as a success.
          qp->post_send(send_wr(8, Opcode::Send, {}));
          CHECK_WC(WAIT_WC(*node.recv_cq, "the receive of a SEND whose sender failed during the copy"),
                   "the receive of a SEND whose sender failed during the copy", .wr_id = 7,
                   .status = WcStatus::WrFlushErr);
          signal(env, "checked");
          return;
        }
        char* src = map_anonymous(kCopyLen);
        // Before the registration: rdmx's own watch of the pages (for the
        // registration cache) then finds them taken and does without.
        MissingPages missing(src, kCopyLen);
        auto mr = node.pd->register_memory(src, kCopyLen, Access::LocalWrite);
        auto qp = connected_qp(env, node, kReceiver, "s");
        const auto pid = static_cast<pid_t>(std::stol(await(env, "pid")));
        {
          const Sge sge = mr->sge(0, kCopyLen);
          qp->post_send(send_wr(1, Opcode::Send, {&sge, 1}));
          CHECK(missing.wait_for_access()) << "the receiver never started copying the SEND's payload";
          StoppedProcess stopped(pid);
          const auto start = std::chrono::steady_clock::now();
          qp->set_error("the test fails the sender while the receiver is stopped inside its copy");
          const auto took = std::chrono::steady_clock::now() - start;
          CHECK_LT(took, std::chrono::seconds(5)) << "set_error waited " << std::chrono::duration<double>(took).count()
                                                  << " s for a stopped peer's copy out of this process (RDMX_TIMEOUT "
                                                  << default_timeout().count() << " ms)";
          CHECK_WC(WAIT_WC(*node.send_cq, "the SEND, flushed"), "the SEND, flushed", .wr_id = 1,
                   .status = WcStatus::WrFlushErr);
          missing.fill(0x5a);  // the application writes its buffer again
        }
        signal(env, "continued");
        await(env, "checked");
      },
      options));
}

TEST(ShmProvider, AWriteInsideItsCopyDoesNotHoldTheDeregistrationOfAllocatedMemory) {
  Options options;
  options.provider = "shm";
  ASSERT_TRUE(run_ranks(
      2, Placement::Local,
      [](RankEnv& env) {
        Node node(env);
        if (env.rank() == kReceiver) {
          auto mr = node.pd->allocate_memory(kCopyLen, Access::LocalWrite | Access::RemoteWrite);
          auto qp = connected_qp(env, node, kSender, "w");
          publish_region(env, "allocated", *mr);
          await(env, "copying");
          const auto start = std::chrono::steady_clock::now();
          mr.reset();
          const auto took = std::chrono::steady_clock::now() - start;
          CHECK_LT(took, default_timeout() / 2)
              << "deregistering allocated memory waited " << std::chrono::duration<double>(took).count()
              << " s for a peer's WRITE in progress (RDMX_TIMEOUT " << default_timeout().count() << " ms)";
          // Memory allocated next must stay as it was once the WRITE goes on.
          auto next = node.pd->allocate_memory(kCopyLen, Access::LocalWrite);
          std::memset(next->addr(), 0x11, kCopyLen);
          signal(env, "deregistered");
          await(env, "finished");
          CHECK_BYTES(next->addr(), kCopyLen, 0x11, "memory allocated after a WRITE's target was deregistered");
          return;
        }
        Buffer first(64);
        auto first_mr = node.pd->register_memory(first.data(), 64, Access::LocalWrite);
        char* src = map_anonymous(kCopyLen);
        MissingPages missing(src, kCopyLen);
        auto mr = node.pd->register_memory(src, kCopyLen, Access::LocalWrite);
        auto qp = connected_qp(env, node, kReceiver, "w");
        RemoteRegion allocated = fetch_region(env, "allocated");
        // The first WRITE takes the ring; the receiver offers the region then.
        const int mapped_before = mappings_of("rdmx-region");
        CHECK_WC(
            RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, first_mr->sge(0, 64), allocated.addr, allocated.rkey, 1),
            "first WRITE into the allocated region", .wr_id = 1);
        CHECK(eventually([&] { return mappings_of("rdmx-region") == mapped_before + 1; }, std::chrono::seconds(20)))
            << "the receiver never offered its allocated region";
        // This WRITE's copy faults on the missing source pages and waits inside the copy.
        std::thread poster([&] {
          const Sge sge = mr->sge(0, kCopyLen);
          qp->post_send(rdma_wr(2, Opcode::RdmaWrite, {&sge, 1}, allocated.addr, allocated.rkey));
        });
        CHECK(missing.wait_for_access()) << "the WRITE never started copying";
        signal(env, "copying");
        await(env, "deregistered");
        missing.fill(0x5a);
        poster.join();
        const WorkCompletion wc = WAIT_WC(*node.send_cq, "the WRITE whose target was deregistered during its copy");
        CHECK(wc.wr_id == 2 && (wc.status == WcStatus::Success || wc.status == WcStatus::RemAccessErr))
            << "the WRITE completed with " << to_string(wc.status) << " (wr_id " << wc.wr_id << ")";
        signal(env, "finished");
      },
      options));
}

}  // namespace
}  // namespace rdmx::test
