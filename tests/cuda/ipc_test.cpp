// SPDX-License-Identifier: MIT
// CUDA memory shared between processes (services/cuda/ipc.hpp): two forked
// ranks, one exporting device memory of each kind (cudaMalloc-style through
// a legacy IPC handle, cuMemCreate through a file descriptor sent over a
// Unix socket), the other opening it and copying in and out on the GPU; the
// exporter then sees the peer's bytes. Also the driver's rules rdmx must
// live with: no import by the exporter, one import per process.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "providers/shm/handshake.hpp"
#include "services/cuda/context.hpp"
#include "services/cuda/driver.hpp"
#include "services/cuda/ipc.hpp"
#include "services/cuda/pointer.hpp"
#include "support/cuda_device.hpp"
#include "support/harness.hpp"

namespace rdmx {
namespace {

namespace cu = core::cuda;
using test::cuda_copy;
using test::DeviceBuffer;

void send_handle(int socket, const cu::SharedMemoryHandle& handle, int fd) {
  CHECK_EQ(shm::send_with_fd(socket, &handle, sizeof handle, fd), 0);
  if (fd >= 0) ::close(fd);
}

cu::SharedMemoryHandle receive_handle(int socket, int* fd) {
  cu::SharedMemoryHandle handle;
  for (int tries = 0; tries < 200; ++tries) {
    std::size_t got = 0;
    const int error = shm::receive_message(socket, &handle, sizeof handle, &got, fd);
    if (error == 0) {
      CHECK_EQ(got, sizeof handle);
      return handle;
    }
    CHECK_EQ(error, EAGAIN);
    pollfd p{socket, POLLIN, 0};
    ::poll(&p, 1, 100);
  }
  throw std::runtime_error("no CUDA memory handle arrived within 20 s");
}

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> bytes(n);
  for (std::size_t i = 0; i < n; ++i) bytes[i] = static_cast<std::uint8_t>(i * 31 + seed);
  return bytes;
}

// Rank 0 exports [buffer + offset, +n) after filling it; rank 1 opens it,
// checks the bytes, overwrites them; rank 0 checks the new bytes.
void share_one_way(test::RankEnv& env, int socket, char* buffer, std::size_t n, std::size_t offset) {
  const auto first = pattern(n, 1);
  const auto second = pattern(n, 2);
  if (env.rank() == 0) {
    cuda_copy(buffer + offset, first.data(), n);
    const cu::PointerInfo info = cu::classify(buffer + offset, n, "test");
    CHECK(info.type == MemoryType::Cuda);
    int fd = -1;
    const cu::SharedMemoryHandle handle = cu::export_memory(info, &fd, "test");
    CHECK_EQ(handle.size, info.allocation_length);
    // The exporter itself cannot open a legacy handle, and says so.
    if (handle.kind == cu::SharedMemoryHandle::kLegacy) {
      try {
        cu::ImportedMemory self(handle, -1, "test");
        CHECK(false);
      } catch (const Error& e) {
        CHECK(std::string(e.what()).find("cuIpcOpenMemHandle failed") != std::string::npos);
      }
    }
    send_handle(socket, handle, fd);
    env.barrier("written by the peer");
    std::vector<std::uint8_t> seen(n);
    cuda_copy(seen.data(), buffer + offset, n);
    CHECK(seen == second);
  } else {
    int fd = -1;
    const cu::SharedMemoryHandle handle = receive_handle(socket, &fd);
    {
      cu::ImportedMemory imported(handle, fd, "test");
      CHECK_EQ(imported.size(), handle.size);
      std::vector<std::uint8_t> seen(n);
      cuda_copy(seen.data(), imported.base() + offset, n);
      CHECK(seen == first);
      cuda_copy(imported.base() + offset, second.data(), n);
      if (handle.kind == cu::SharedMemoryHandle::kLegacy) {
        // A second open of the same handle in one process: older drivers
        // refuse it, driver 580 (CUDA 13) allows it. rdmx depends on neither
        // (one import per peer allocation); either way nothing is lost.
        try {
          cu::ImportedMemory again(handle, -1, "test");
          std::vector<std::uint8_t> through_again(n);
          cuda_copy(through_again.data(), again.base() + offset, n);
          CHECK(through_again == second) << "a second open of a legacy handle shows other bytes";
        } catch (const Error& e) {
          CHECK(std::string(e.what()).find("cuIpcOpenMemHandle failed") != std::string::npos) << e.what();
        }
      }
    }
    if (handle.kind == cu::SharedMemoryHandle::kLegacy) {
      // Through the process-wide cache, every user gets the one import, and
      // it closes when the last lets go (then it can be opened again).
      const int peer = 0;  // names the exporter in the cache's key (its rank stands in for its pid)
      auto first_user = cu::import_shared(peer, handle, -1, "test");
      auto second_user = cu::import_shared(peer, handle, -1, "test");
      CHECK(first_user == second_user);
      std::vector<std::uint8_t> seen(n);
      cuda_copy(seen.data(), second_user->base() + offset, n);
      CHECK(seen == second);
      first_user.reset();
      second_user.reset();
      cu::ImportedMemory reopened(handle, -1, "test");
      CHECK_EQ(reopened.size(), handle.size);
    }
    env.barrier("written by the peer");
  }
}

class CudaIpc : public ::testing::Test {
 protected:
  void SetUp() override {
    RDMX_REQUIRE_GPU_BEFORE_FORK();
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sockets_), 0);
  }
  void TearDown() override {
    for (int s : sockets_)
      if (s >= 0) ::close(s);
  }
  int sockets_[2] = {-1, -1};
};

TEST_F(CudaIpc, CudaMallocMemoryThroughALegacyHandle) {
  const int sockets[2] = {sockets_[0], sockets_[1]};
  ASSERT_TRUE(test::run_ranks(2, test::Placement::Local, [&](test::RankEnv& env) {
    std::string why;
    CHECK(test::cuda_for_test(&why) != nullptr);
    DeviceBuffer buffer(3 << 20);
    // A pointer inside the allocation, as a caching allocator hands out.
    share_one_way(env, sockets[env.rank()], static_cast<char*>(buffer.get()), 1 << 20, (1 << 20) + 4096);
  }));
}

TEST_F(CudaIpc, CuMemCreateMemoryThroughAFileDescriptor) {
  const int sockets[2] = {sockets_[0], sockets_[1]};
  ASSERT_TRUE(test::run_ranks(2, test::Placement::Local, [&](test::RankEnv& env) {
    std::string why;
    CHECK(test::cuda_for_test(&why) != nullptr);
    test::VmmBuffer buffer;
    share_one_way(env, sockets[env.rank()], buffer.get(), buffer.size() / 2, buffer.size() / 4);
  }));
}

// A cuMemCreate allocation made without an exportable handle type cannot be
// shared, and the error says how to allocate one that can.
TEST(CudaIpcRefusal, UnexportableAllocationIsRefusedWithTheReason) {
  RDMX_REQUIRE_GPU();
  test::VmmBuffer buffer(1, /*exportable=*/false);
  const cu::PointerInfo info = cu::classify(buffer.get(), 64, "test");
  int fd = -1;
  try {
    cu::export_memory(info, &fd, "test");
    ADD_FAILURE() << "exported an allocation without a shareable handle type";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NotSupported);
    EXPECT_NE(std::string(e.what()).find("POSIX_FILE_DESCRIPTOR"), std::string::npos) << e.what();
  }
  EXPECT_EQ(fd, -1);
}

}  // namespace
}  // namespace rdmx
