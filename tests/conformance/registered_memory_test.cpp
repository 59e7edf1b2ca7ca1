// SPDX-License-Identifier: MIT
// Registration takes only memory the process has, with the access asked, as
// ibv_reg_mr does (the kernel refuses to pin such a range: EFAULT); and a
// region whose memory is unmapped after registration grants no access any
// more, to a peer or locally, without harm to the owner or to whatever is
// mapped at the same address next (where a NIC pins the pages, it goes on
// serving the old pages, as InfiniBand does).
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "conformance/conformance.hpp"
#include "rdmx/registration_cache.hpp"

namespace rdmx::test {
namespace {

constexpr std::size_t kPage = 4096;
constexpr Access kRemoteRW = Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead;

std::string hex(const void* p) {
  char text[32];
  std::snprintf(text, sizeof(text), "%p", p);
  return text;
}

// The refusal names the operation, what is wrong and where it starts.
void expect_refused(ProtectionDomain& pd, void* addr, std::size_t length, Access access, const std::string& what,
                    const void* where) {
  const Error e = EXPECT_RDMX_ERROR(ErrorCode::InvalidArgument, pd.register_memory(addr, length, access));
  const std::string text = e.what();
  CHECK(text.find("register_memory") != std::string::npos) << "the error names the operation: " << text;
  CHECK(text.find(what) != std::string::npos) << "the error says \"" << what << "\": " << text;
  CHECK(text.find(hex(where)) != std::string::npos) << "the error names " << hex(where) << ": " << text;
}

TEST_P(HostMemoryConformance, RegistrationRefusesMemoryTheProcessDoesNotHave) {
  ASSERT_TRUE(run(1, [](RankEnv& env) {
    Node node(env);
    // A page with unmapped pages on both sides, so nothing beyond it is ours.
    char* fence = map_anonymous(3 * kPage);
    CHECK_EQ(::munmap(fence, kPage), 0);
    CHECK_EQ(::munmap(fence + 2 * kPage, kPage), 0);
    char* page = fence + kPage;

    // A 4 KiB buffer with a 1 TiB length.
    expect_refused(*node.pd, page, std::size_t{1} << 40, kRemoteRW, "is not mapped", page + kPage);
    // Just one byte too many.
    expect_refused(*node.pd, page, kPage + 1, Access::LocalWrite, "is not mapped", page + kPage);
    // An address nothing is mapped at.
    expect_refused(*node.pd, reinterpret_cast<void*>(0x1000), kPage, Access::LocalWrite, "is not mapped",
                   reinterpret_cast<void*>(0x1000));
    // A hole in the middle of a range.
    char* three = map_anonymous(3 * kPage);
    CHECK_EQ(::munmap(three + kPage, kPage), 0);
    expect_refused(*node.pd, three, 3 * kPage, Access::LocalWrite, "is not mapped", three + kPage);
    // Memory mapped without access at all.
    void* none = ::mmap(nullptr, kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(none != MAP_FAILED);
    expect_refused(*node.pd, none, kPage, Access::RemoteRead, "without read access", none);
    // Read-only memory: readable rights only.
    void* ro = ::mmap(nullptr, kPage, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(ro != MAP_FAILED);
    expect_refused(*node.pd, ro, kPage, Access::LocalWrite, "without write access", ro);
    expect_refused(*node.pd, ro, kPage, kRemoteRW, "without write access", ro);
    auto readable = node.pd->register_memory(ro, kPage, Access::RemoteRead);
    CHECK_EQ(readable->length(), kPage);
    auto sendable = node.pd->register_memory(ro, kPage, Access::None);
    CHECK_EQ(sendable->length(), kPage);
    // The page itself, whole, and ranges across adjacent mappings are fine.
    auto whole = node.pd->register_memory(page, kPage, kRemoteRW);
    CHECK_EQ(whole->length(), kPage);
    auto two = node.pd->register_memory(three, kPage, kRemoteRW);
    CHECK_EQ(two->length(), kPage);
    sendable.reset();
    readable.reset();
    whole.reset();
    two.reset();
    ::munmap(ro, kPage);
    ::munmap(none, kPage);
    ::munmap(three, kPage);
    ::munmap(three + 2 * kPage, kPage);
    ::munmap(page, kPage);
  }));
}

// 256 KiB: past the size from which shm copies into a peer's registered heap
// memory from the initiator's process (RDMX_SHM_HEAP_DIRECT_MIN).
constexpr std::size_t kRegion = 256 * 1024;
constexpr std::uint64_t kOldSeed = 81;
constexpr std::uint64_t kNewSeed = 82;
constexpr std::uint64_t kWriteSeed = 83;
constexpr int kTries = 4;

TEST_P(HostMemoryConformance, RegionUnmappedAfterRegistrationGrantsNoAccess) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    Node node(env);
    // A NIC that pins the pages keeps serving them, never the new memory;
    // a software provider refuses.
    const bool pinned = node.device->caps().registration_pins_memory;
    // Asked in the rank: the watch's thread must not start in the parent, which forks.
    const UnmapDetection detection = unmap_detection();
    if (!pinned && !detection.available) {
      std::fprintf(stderr, "[rank %d] not checked: this process cannot watch for unmaps (%s)\n", env.rank(),
                   detection.how.c_str());
      return;
    }
    if (env.rank() == kTarget) {
      char* buf = map_anonymous(kRegion);
      fill_pattern(buf, kRegion, kOldSeed);
      auto mr = node.pd->register_memory(buf, kRegion, kRemoteRW);
      auto qp = connected_qp(env, node, kInitiator, "t");
      auto local_qp = connected_qp(env, node, kInitiator, "local");
      publish_region(env, "region", *mr);
      await(env, "used");  // the peer has WRITTEN and READ through the key
      CHECK_PATTERN(buf, kRegion, kWriteSeed, 0, "the WRITE before the unmap");
      // The application frees the memory without deregistering, and new
      // memory comes back at the same address.
      CHECK_EQ(::munmap(buf, kRegion), 0);
      char* again = map_anonymous(kRegion, buf);
      fill_pattern(again, kRegion, kNewSeed);
      signal(env, "unmapped");
      std::vector<std::unique_ptr<QueuePair>> tries;
      for (int i = 0; i < kTries; ++i) tries.push_back(connected_qp(env, node, kInitiator, "try" + std::to_string(i)));
      await(env, "refused");
      CHECK_PATTERN(again, kRegion, kNewSeed, 0, "new memory at the old region's address after refused accesses");
      // Locally too: a SEND from the region is refused (LOC_PROT_ERR), or
      // sends the old pages where they are pinned.
      Sge sge = mr->sge(0, 64);
      local_qp->post_send(send_wr(7, Opcode::Send, {&sge, 1}));
      auto wc = WAIT_WC(*node.send_cq, "a SEND from a region whose memory was unmapped");
      CHECK_WC(wc, "SEND from a region whose memory was unmapped", .wr_id = 7,
               .status = pinned ? WcStatus::Success : WcStatus::LocProtErr);
      env.barrier("done");
      mr.reset();
      ::munmap(again, kRegion);
    } else {
      Buffer local(2 * kRegion);
      fill_pattern(local.data(), kRegion, kWriteSeed);
      auto mr = node.pd->register_memory(local.data(), local.size(), Access::LocalWrite);
      auto qp = connected_qp(env, node, kTarget, "t");
      auto local_qp = connected_qp(env, node, kTarget, "local");
      Sge sink = mr->sge(0, kRegion);
      local_qp->post_recv(RecvWr{.wr_id = 8, .sg_list = {&sink, 1}});
      const RemoteRegion region = fetch_region(env, "region");
      auto w = RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, mr->sge(0, kRegion), region.addr, region.rkey, 1);
      CHECK_WC(w, "WRITE before the unmap", .wr_id = 1);
      auto r = RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaRead, mr->sge(kRegion, kRegion), region.addr, region.rkey, 2);
      CHECK_WC(r, "READ before the unmap", .wr_id = 2);
      CHECK_PATTERN(local.data() + kRegion, kRegion, kWriteSeed, 0, "the READ before the unmap");
      signal(env, "used");
      await(env, "unmapped");
      // Each on a fresh QP: the first refusal moves a QP to ERROR.
      struct Try {
        Opcode op;
        std::size_t bytes;
        const char* what;
      };
      const Try tries[] = {{Opcode::RdmaWrite, kRegion, "a large WRITE"},
                           {Opcode::RdmaWrite, 64, "a small WRITE"},
                           {Opcode::RdmaRead, kRegion, "a large READ"},
                           {Opcode::RdmaRead, 64, "a small READ"}};
      static_assert(std::size(tries) == kTries);
      std::uint64_t id = 10;
      for (const Try& t : tries) {
        auto fresh = connected_qp(env, node, kTarget, "try" + std::to_string(id - 10));
        const std::size_t at = t.op == Opcode::RdmaRead ? kRegion : 0;
        auto wc = RDMA_SYNC(*fresh, *node.send_cq, t.op, mr->sge(at, t.bytes), region.addr, region.rkey, id);
        CHECK_WC(wc, std::string(t.what) + " into a region whose memory was unmapped", .wr_id = id,
                 .status = pinned ? WcStatus::Success : WcStatus::RemAccessErr);
        ++id;
      }
      // Refused: nothing was read. Pinned: the old pages were.
      CHECK_PATTERN(local.data() + kRegion, kRegion, kWriteSeed, 0, "what READs brought after the unmap");
      signal(env, "refused");
      env.barrier("done");
    }
  }));
}

}  // namespace
}  // namespace rdmx::test
