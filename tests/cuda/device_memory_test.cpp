// SPDX-License-Identifier: MIT
// Device memory through the verbs API, between two forked ranks, on every
// provider whose caps say it serves device memory: WRITE, READ, SEND/RECV
// and atomics with device buffers on either side or both, sizes that go
// through the rings and sizes that do not, and the bytes checked through the
// driver. On the simulated driver in CI (where the CPU cannot touch device
// memory, so any path that forgets it crashes the rank), on a GPU where one
// is lent. A provider whose caps say none must refuse device memory instead.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "rdmx/comm.hpp"
#include "support/cuda_device.hpp"
#include "support/harness.hpp"
#include "support/providers.hpp"
#include "support/verbs_util.hpp"

namespace rdmx {
namespace {

using namespace test;

constexpr Access kAllAccess = Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead | Access::RemoteAtomic;
constexpr std::size_t kDeviceBytes = (2 << 20) + 16384;
// Where the host -> device WRITE lands, apart from the device -> device one.
constexpr std::size_t kSecond = (1 << 20) + 4096;
// A word no transfer below touches, for the atomics.
constexpr std::size_t kAtomicWord = kDeviceBytes - 64;

std::vector<std::uint8_t> device_bytes(const void* p, std::size_t n) {
  std::vector<std::uint8_t> out(n);
  cuda_copy(out.data(), p, n);
  return out;
}

void fill_device(void* p, std::size_t n, std::uint64_t seed) {
  std::vector<std::uint8_t> bytes(n);
  fill_pattern(bytes.data(), n, seed);
  cuda_copy(p, bytes.data(), n);
}

// Device memory of either kind: cudaMalloc-style (staged by shm too), or
// cuMemCreate memory exportable as a descriptor (which shm's peers map).
class AnyDeviceBuffer {
 public:
  AnyDeviceBuffer(std::size_t bytes, bool exportable) {
    if (exportable) {
      vmm_ = std::make_unique<VmmBuffer>(1);
      const std::size_t granules = (bytes + vmm_->granularity() - 1) / vmm_->granularity();
      if (granules > 1) vmm_ = std::make_unique<VmmBuffer>(granules);
    } else {
      plain_ = std::make_unique<DeviceBuffer>(bytes);
    }
  }
  void* get() const { return vmm_ ? static_cast<void*>(vmm_->get()) : plain_->get(); }

 private:
  std::unique_ptr<DeviceBuffer> plain_;
  std::unique_ptr<VmmBuffer> vmm_;
};

class DeviceMemory : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { RDMX_REQUIRE_GPU_BEFORE_FORK(); }
  void one_sided_and_two_sided(bool exportable);
};

TEST_P(DeviceMemory, OneSidedAndTwoSidedWithDeviceBuffersOnEitherSide) { one_sided_and_two_sided(false); }
// The same with memory shm's peers map and copy directly after its first use.
TEST_P(DeviceMemory, OneSidedAndTwoSidedWithExportableDeviceBuffers) { one_sided_and_two_sided(true); }

void DeviceMemory::one_sided_and_two_sided(bool exportable) {
  Options options;
  options.provider = GetParam();
  ASSERT_TRUE(run_ranks(
      2, Placement::Local,
      [exportable](RankEnv& env) {
        std::string why;
        CHECK(cuda_for_test(&why) != nullptr);
        Node node(env);
        AnyDeviceBuffer device(kDeviceBytes, exportable);
        Buffer host(kDeviceBytes);
        if (node.device->caps().cuda_memory == CudaMemorySupport::None) {
          try {
            node.pd->register_memory(device.get(), kDeviceBytes, kAllAccess);
            CHECK(false);
          } catch (const Error& e) {
            CHECK(e.code() == ErrorCode::NotSupported);
          }
          return;
        }
        auto device_mr = node.pd->register_memory(device.get(), kDeviceBytes, kAllAccess);
        auto host_mr = node.pd->register_memory(host.data(), kDeviceBytes, kAllAccess);
        CHECK(device_mr->memory_type() == MemoryType::Cuda);
        const std::uint64_t zero = 0;
        cuda_copy(static_cast<char*>(device.get()) + kAtomicWord, &zero, 8);
        const int me = env.rank();
        const int peer = 1 - me;
        publish_region(env, "device/" + std::to_string(me), *device_mr);
        publish_region(env, "host/" + std::to_string(me), *host_mr);
        auto qp = connected_qp(env, node, peer, "qp");
        const RemoteRegion peer_device = fetch_region(env, "device/" + std::to_string(peer));
        const RemoteRegion peer_host = fetch_region(env, "host/" + std::to_string(peer));
        // Through the rings (small) and not (large: cross-memory or pieces).
        const std::vector<std::uint32_t> sizes{8, 4096, 8192 + 8, 1 << 20};
        if (me == 0) {
          std::uint64_t wr_id = 1;
          for (std::uint32_t n : sizes) {
            const std::uint64_t seed = 100 + n;
            // WRITE device -> device, host -> device, device -> host.
            fill_device(device.get(), n, seed);
            RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, device_mr->sge(0, n), peer_device.addr, peer_device.rkey,
                      wr_id++);
            fill_pattern(host.data(), n, seed + 1);
            RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, host_mr->sge(0, n), peer_device.addr + kSecond,
                      peer_device.rkey, wr_id++);
            RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, device_mr->sge(0, n), peer_host.addr, peer_host.rkey,
                      wr_id++);
            signal(env, "written/" + std::to_string(n));
            await(env, "checked/" + std::to_string(n));
            // READ device -> device and device -> host (the peer filled its buffer with seed + 2).
            RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaRead, device_mr->sge(0, n), peer_device.addr, peer_device.rkey,
                      wr_id++);
            auto got = device_bytes(device.get(), n);
            CHECK_PATTERN(got.data(), n, seed + 2, 0, "READ device <- peer device");
            RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaRead, host_mr->sge(0, n), peer_device.addr, peer_device.rkey,
                      wr_id++);
            CHECK_PATTERN(host.data(), n, seed + 2, 0, "READ host <- peer device");
            // SEND from device memory into the peer's receive in device memory.
            await(env, "receive posted/" + std::to_string(n));
            fill_device(device.get(), n, seed + 3);
            const std::vector<Sge> from{device_mr->sge(0, n)};
            qp->post_send(send_wr(wr_id, Opcode::Send, from));
            CHECK_WC(WAIT_WC(*node.send_cq, "SEND"), "SEND", .wr_id = wr_id, .status = WcStatus::Success);
            ++wr_id;
            await(env, "received/" + std::to_string(n));
          }
          // Atomics on a word of the peer's device memory, the old value into ours.
          // The word was 0: FETCH_ADD's old value (into device memory) is 0.
          fill_device(device.get(), 64 + 8, 1);
          ATOMIC_SYNC(*qp, *node.send_cq, Opcode::AtomicFetchAdd, device_mr->sge(64, 8), peer_device.addr + kAtomicWord,
                      peer_device.rkey, 5, 0, 900);
          CHECK(device_bytes(static_cast<char*>(device.get()) + 64, 8) == std::vector<std::uint8_t>(8, 0));
          ATOMIC_SYNC(*qp, *node.send_cq, Opcode::AtomicCmpSwap, host_mr->sge(64, 8), peer_device.addr + kAtomicWord,
                      peer_device.rkey, 5, 77, 901);
          std::uint64_t seen = 0;
          std::memcpy(&seen, host.data() + 64, 8);
          CHECK_EQ(seen, 5u);
          signal(env, "atomics done");
        } else {
          for (std::uint32_t n : sizes) {
            const std::uint64_t seed = 100 + n;
            await(env, "written/" + std::to_string(n));
            auto got = device_bytes(device.get(), n);
            CHECK_PATTERN(got.data(), n, seed, 0, "WRITE device -> device");
            got = device_bytes(static_cast<char*>(device.get()) + kSecond, n);
            CHECK_PATTERN(got.data(), n, seed + 1, 0, "WRITE host -> device");
            CHECK_PATTERN(host.data(), n, seed, 0, "WRITE device -> host");
            fill_device(device.get(), n, seed + 2);
            signal(env, "checked/" + std::to_string(n));
            const std::vector<Sge> into{device_mr->sge(8192, n)};
            qp->post_recv(RecvWr{.wr_id = 7, .sg_list = into});
            signal(env, "receive posted/" + std::to_string(n));
            CHECK_WC(WAIT_WC(*node.recv_cq, "RECV"), "RECV", .wr_id = 7, .status = WcStatus::Success, .byte_len = n);
            got = device_bytes(static_cast<char*>(device.get()) + 8192, n);
            CHECK_PATTERN(got.data(), n, seed + 3, 0, "SEND device -> RECV device");
            signal(env, "received/" + std::to_string(n));
          }
          // The word was 0 before the atomics, 5 after FETCH_ADD, 77 after CMP_SWAP.
          await(env, "atomics done");
          std::uint64_t word = 0;
          cuda_copy(&word, static_cast<char*>(device.get()) + kAtomicWord, 8);
          CHECK_EQ(word, 77u);
        }
        env.barrier("done");
      },
      options));
}

INSTANTIATE_TEST_SUITE_P(Providers, DeviceMemory, ::testing::ValuesIn(tested_providers()),
                         [](const auto& param) { return param.param; });

}  // namespace
}  // namespace rdmx

namespace rdmx {
namespace {

// One operation's buffers must all be in one place: a mix of host and
// device memory is refused by name on every rank, before any data moves,
// and the communicator goes on (with device buffers too).
TEST(DeviceMemoryCollectives, MixedPlacesAreRefusedByNameAndTheCommunicatorGoesOn) {
  RDMX_REQUIRE_GPU_BEFORE_FORK();
  ASSERT_TRUE(test::run_ranks(2, test::Placement::Local, [](test::RankEnv& env) {
    std::string why;
    CHECK(test::cuda_for_test(&why) != nullptr);
    CommOptions options;
    options.provider = "shm";
    options.tag = "device";
    auto comm = Communicator::create(env.store_ptr(), env.rank(), env.world_size(), options);
    test::DeviceBuffer device(4096);
    std::vector<float> host(1024, 1.0f);
    try {
      comm->all_gather(host.data(), device.get(), 512, DataType::Float32);
      CHECK(false);
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::InvalidArgument);
      CHECK(std::string(e.what()).find("send buffer is in host memory and the receive buffer in GPU 0") !=
            std::string::npos)
          << e.what();
    }
    // A device buffer used past its allocation is refused, not touched.
    try {
      comm->broadcast(device.get(), 2048, DataType::Float32, 0);
      CHECK(false);
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::InvalidArgument) << e.what();
    }
    // Each rank gives 256 floats of its rank number; everyone gets both.
    std::vector<float> mine(256, static_cast<float>(env.rank()));
    test::cuda_copy(device.get(), mine.data(), 1024);
    comm->all_gather(device.get(), static_cast<char*>(device.get()) + 2048, 256, DataType::Float32);
    std::vector<float> got(512);
    test::cuda_copy(got.data(), static_cast<char*>(device.get()) + 2048, 2048);
    CHECK_EQ(got[0], 0.0f);
    CHECK_EQ(got[511], 1.0f);
    comm->all_reduce(host.data(), host.data(), 1024, DataType::Float32, ReduceOp::Sum);
    CHECK_EQ(host[0], 2.0f);
  }));
}
}  // namespace
}  // namespace rdmx
