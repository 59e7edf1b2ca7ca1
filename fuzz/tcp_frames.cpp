// SPDX-License-Identifier: MIT
// Fuzz target: tcp wire frames as a QP receives them. Two QPs of one device
// connect over loopback (challenge, HELLO, proof); the input is then written
// raw into the initiator's socket, as a peer process could send it, and the
// sending side shut down. The receiving QP must consume it and end in ERROR
// (every input ends in a close) within a second, having changed no byte
// outside the region it registered for remote access.
//
// Inputs may name that region: the 4 bytes "RKEY" become its rkey and the 8
// bytes "@ADDR@@@" its address, so the corpus reaches WRITE, READ and
// atomic handling rather than stopping at the key check.
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "providers/tcp/testing.hpp"
#include "rdmx/error.hpp"
#include "rdmx/verbs.hpp"

namespace {

using namespace rdmx;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kRegion = 64 * 1024;
constexpr std::size_t kGuard = 4096;
constexpr std::uint8_t kGuardByte = 0x5a;

struct Setup {
  std::shared_ptr<Device> device;
  std::unique_ptr<ProtectionDomain> pd;
  std::vector<std::uint8_t> memory;  // guard | region | guard | receive buffers
  std::unique_ptr<MemoryRegion> region;
  std::unique_ptr<MemoryRegion> receives;
};

Setup& setup() {
  static Setup* s = [] {
    ::setenv("RDMX_SOCKET_IFNAME", "lo", 0);
    ::setenv("RDMX_TIMEOUT", "2", 0);
    ::setenv("RDMX_DEBUG", "NONE", 0);
    auto* out = new Setup;
    out->device = open_device("tcp");
    out->pd = out->device->alloc_pd();
    out->memory.assign(kGuard + kRegion + kGuard + 4096, kGuardByte);
    out->region =
        out->pd->register_memory(out->memory.data() + kGuard, kRegion,
                                 Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead | Access::RemoteAtomic);
    out->receives = out->pd->register_memory(out->memory.data() + kGuard + kRegion + kGuard, 4096, Access::LocalWrite);
    return out;
  }();
  return *s;
}

void replace_all(std::vector<std::uint8_t>& bytes, const char* marker, const void* value, std::size_t n) {
  for (std::size_t i = 0; i + n <= bytes.size(); ++i) {
    if (std::memcmp(bytes.data() + i, marker, n) == 0) std::memcpy(bytes.data() + i, value, n);
  }
}

bool wait_for(const std::function<bool()>& done) {
  const auto deadline = Clock::now() + std::chrono::seconds(1);
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Setup& s = setup();
  auto cq_a = s.device->create_cq(256);
  auto cq_b = s.device->create_cq(256);
  auto a = s.device->create_qp(*s.pd, *cq_a, *cq_a, {});
  auto b = s.device->create_qp(*s.pd, *cq_b, *cq_b, {});
  a->init();
  b->init();
  for (std::uint64_t i = 0; i < 8; ++i) {
    Sge sge = s.receives->sge(i * 512, 512);
    a->post_recv(RecvWr{.wr_id = i, .sg_list = {&sge, 1}});
    b->post_recv(RecvWr{.wr_id = i, .sg_list = {&sge, 1}});
  }
  a->connect(b->local_address());
  b->connect(a->local_address());
  if (!wait_for([&] { return tcp::testing::socket_fd(*a) >= 0 && tcp::testing::socket_fd(*b) >= 0; })) {
    __builtin_trap();  // two QPs of one device did not connect within a second
  }
  // The initiator's socket reaches the other QP: write the input there. Both
  // QPs have the device's nonce, so the lower QP number initiates.
  QueuePair& sender = a->qp_num() < b->qp_num() ? *a : *b;
  QueuePair& victim = &sender == a.get() ? *b : *a;
  std::vector<std::uint8_t> bytes(data, data + size);
  const std::uint32_t rkey = s.region->rkey();
  const std::uint64_t addr = reinterpret_cast<std::uint64_t>(s.memory.data() + kGuard);
  replace_all(bytes, "RKEY", &rkey, 4);
  replace_all(bytes, "@ADDR@@@", &addr, 8);
  const int fd = tcp::testing::socket_fd(sender);
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the victim closed after a bad frame
    sent += static_cast<std::size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  if (!wait_for([&] { return victim.state() == QpState::Error; })) __builtin_trap();  // the input was not consumed
  for (std::size_t i = 0; i < kGuard; ++i) {
    if (s.memory[i] != kGuardByte || s.memory[kGuard + kRegion + i] != kGuardByte) __builtin_trap();
  }
  return 0;
}
