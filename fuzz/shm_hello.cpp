// SPDX-License-Identifier: MIT
// Fuzz target: the shm provider's connection handshake as the accepting
// device reads it. A raw Unix socket connects to the device's socket and
// sends a HELLO with a memfd attached; the input fills the HELLO and the
// segment. Within a second the device must answer (ACCEPT, or a refusal
// that fails the QP the HELLO named) or close the connection.
//
// The input's first byte steers it past the checks a random input never
// passes: bit 0 names the waiting QP and its peer correctly, bit 1 gives the
// segment size this build expects, bit 2 writes a valid segment header, bit
// 3 points the probe at a real word of this process.
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "providers/shm/address.hpp"
#include "providers/shm/handshake.hpp"
#include "providers/shm/ring.hpp"
#include "providers/shm/shm_qp.hpp"
#include "rdmx/error.hpp"
#include "rdmx/verbs.hpp"

namespace {

using namespace rdmx;

struct Setup {
  std::shared_ptr<Device> device;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<CompletionQueue> cq;
};

Setup& setup() {
  static Setup* s = [] {
    ::setenv("RDMX_TIMEOUT", "2", 0);
    ::setenv("RDMX_DEBUG", "NONE", 0);
    auto* out = new Setup;
    out->device = open_device("shm");
    out->pd = out->device->alloc_pd();
    out->cq = out->device->create_cq(256);
    return out;
  }();
  return *s;
}

std::uint64_t probe_word = 0x1234567887654321ull;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  Setup& s = setup();
  const std::uint8_t steer = data[0];
  ++data;
  --size;

  auto victim = s.device->create_qp(*s.pd, *s.cq, *s.cq, {});
  victim->init();
  const shm::ShmAddress mine = shm::ShmAddress::decode(victim->local_address());
  // A made-up peer with the lowest nonce: the lower (nonce, qpn) initiates,
  // so the victim waits to accept.
  shm::ShmAddress peer = mine;
  peer.nonce = 0;
  peer.qpn = 7;
  // connect() checks that the peer's socket exists; as the acceptor the victim never uses it.
  victim->connect(peer.encode());

  shm::Hello hello;
  std::memcpy(&hello, data, std::min(size, sizeof(hello)));
  if (steer & 1) {
    hello.ids = {
        .target_nonce = mine.nonce, .target_qpn = mine.qpn, .source_qpn = peer.qpn, .source_nonce = peer.nonce};
  }
  if (steer & 2) {
    hello.ring_slots = shm::kRingSlots;
    hello.segment_bytes = shm::segment_size(shm::kRingSlots);
  }
  if (steer & 8) {
    hello.probe_addr = reinterpret_cast<std::uint64_t>(&probe_word);
    hello.probe_value = probe_word;
  }
  const std::size_t segment_bytes =
      (steer & 2) ? shm::segment_size(shm::kRingSlots) : static_cast<std::size_t>(hello.segment_bytes % (1u << 20));
  const int memfd = ::memfd_create("fuzz-segment", MFD_CLOEXEC);
  if (memfd < 0 || ::ftruncate(memfd, static_cast<off_t>(segment_bytes)) != 0) __builtin_trap();
  if (size > sizeof(hello) && segment_bytes > 0) {
    [[maybe_unused]] auto written =
        ::pwrite(memfd, data + sizeof(hello), std::min(size - sizeof(hello), segment_bytes), 0);
  }
  if ((steer & 4) && segment_bytes >= sizeof(shm::SegmentHeader)) {
    shm::SegmentHeader header{};
    header.magic = shm::kSegmentMagic;
    header.version = shm::kSegmentVersion;
    header.ring_slots = shm::kRingSlots;
    [[maybe_unused]] auto written = ::pwrite(memfd, &header, 16, 0);
  }

  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, mine.socket_path.c_str(), sizeof(address.sun_path) - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) __builtin_trap();
  shm::send_with_fd(fd, &hello, sizeof(hello), memfd);
  ::close(memfd);
  // Whatever the device answers, the exchange ends within a second: an answer
  // (then this side closes), or the device closing.
  char answer[256];
  timeval bound{.tv_sec = 1, .tv_usec = 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof(bound));
  const ssize_t got = ::recv(fd, answer, sizeof(answer), 0);
  if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    // Silence is right only when the HELLO named no waiting QP: the device drops it (after its bound).
    if ((steer & 1) && victim->state() != QpState::Error) {
      // named the victim and well formed enough to be offered: it must have answered
      if (hello.magic == shm::kHelloMagic && hello.version == shm::kHandshakeVersion) __builtin_trap();
    }
  }
  // A connected victim notices the close on its next work request, as a
  // QP whose peer vanished does; it is destroyed either way.
  ::close(fd);
  return 0;
}
