// SPDX-License-Identifier: MIT
// The messages that set up a shm QP connection over the acceptor's Unix
// socket. The initiator sends HELLO with the shared segment's memfd attached
// (SCM_RIGHTS); the acceptor maps it, proves cross-memory attach works by
// reading the initiator's probe word, and answers ACCEPT (or a refusal with
// errno), after which the initiator proves the same in the other direction.
// Later bytes on the socket are wake-ups; its end-of-file means the peer is gone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "providers/soft_rc/connection.hpp"
#include "services/cuda/ipc.hpp"

namespace rdmx::shm {

constexpr std::uint32_t kHelloMagic = 0x4f4c4548;   // "HELO"
constexpr std::uint32_t kAcceptMagic = 0x54504341;  // "ACPT"
constexpr std::uint32_t kHandshakeVersion = 1;

struct Hello {
  std::uint32_t magic = kHelloMagic;
  std::uint32_t version = kHandshakeVersion;
  core::ConnectionIds ids;
  std::uint64_t segment_bytes = 0;
  std::uint32_t ring_slots = 0;
  std::uint32_t reserved = 0;
  std::uint64_t probe_addr = 0;
  std::uint64_t probe_value = 0;
};
// The layout of handshake version 1: the ids lie where their four fields did.
static_assert(offsetof(Hello, ids) == 8 && sizeof(core::ConnectionIds) == 24 && sizeof(Hello) == 64);

struct Accept {
  std::uint32_t magic = kAcceptMagic;
  std::int32_t error = 0;  // 0, or the errno of the acceptor's failed check
  std::uint64_t probe_addr = 0;
  std::uint64_t probe_value = 0;
};

// A region the peer may copy into or out of directly, offered after the
// peer first used its rkey: one from allocate_memory() (sent with its
// memfd, which the peer maps), or device memory (sent with the memfd of its
// state page and the allocation's exported descriptor, which the peer
// opens through CUDA IPC and copies with the GPU's copy engines).
constexpr std::uint32_t kShareMagic = 0x45524853;  // "SHRE"
struct ShareOffer {
  std::uint32_t magic = kShareMagic;
  std::uint32_t rkey = 0;
  std::uint64_t base = 0;  // the region's address in the target
  std::uint64_t length = 0;
  std::uint64_t map_length = 0;
  std::uint64_t state_offset = 0;
  std::uint32_t access = 0;
  std::uint32_t slot = 0;            // this QP's busy slot in the region's SharedRegionState
  std::uint32_t device = 0;          // 1: device memory, described by `cuda`
  std::uint32_t heap = 0;            // 1: the target's own memory at `base`, reached across processes
  std::uint64_t cuda_offset = 0;     // where the region starts in its allocation
  std::uint32_t on_first_touch = 0;  // 1: Residency::OnFirstTouch, mapped without populating it
  std::uint32_t pad = 0;
  core::cuda::SharedMemoryHandle cuda{};
};

// Receives one message (the sockets are SOCK_SEQPACKET) of at most
// `capacity` bytes and the descriptor sent with it (-1 when none); *got is
// its length. Returns 0, EAGAIN, ECONNRESET at end of file, EMFILE when a
// descriptor sent could not be received (this process's open-files limit),
// or errno.
// A second descriptor goes to *second when given, else is closed.
int receive_message(int socket, void* bytes, std::size_t capacity, std::size_t* got, int* fd, int* second = nullptr);

// Sends `bytes` and, when fd >= 0, the descriptor with them (and `second`
// after it, when >= 0). Returns errno (0 on success).
int send_with_fd(int socket, const void* bytes, std::size_t length, int fd, int second = -1);
// Receives exactly `length` bytes in one message and the descriptor sent with
// them (-1 when none). Returns 0, EAGAIN when nothing has arrived, ECONNRESET
// at end of file, EPROTO for a short message, EMFILE as receive_message, or errno.
int receive_with_fd(int socket, void* bytes, std::size_t length, int* fd);
// Reads 8 bytes at `addr` in process `pid` with process_vm_readv and compares
// them with `value`. Returns 0 or the errno that explains the failure.
int probe_cross_memory(int pid, std::uint64_t addr, std::uint64_t value);
// What to tell the user when cross-memory attach to `pid` fails with `error`.
std::string cross_memory_hint(int error);

}  // namespace rdmx::shm
