// SPDX-License-Identifier: MIT
#include "providers/shm/handshake.hpp"

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace rdmx::shm {

int send_with_fd(int socket, const void* bytes, std::size_t length, int fd, int second) {
  iovec iov{const_cast<void*>(bytes), length};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  const int fds[2] = {fd, second};
  const std::size_t count = fd < 0 ? 0 : (second < 0 ? 1 : 2);
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 2)];
  if (count > 0) {
    std::memset(control, 0, sizeof(control));
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * count);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * count);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * count);
  }
  ssize_t n = ::sendmsg(socket, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n < 0) return errno;
  return static_cast<std::size_t>(n) == length ? 0 : EPROTO;
}

int receive_message(int socket, void* bytes, std::size_t capacity, std::size_t* got, int* fd, int* second) {
  *fd = -1;
  if (second != nullptr) *second = -1;
  *got = 0;
  iovec iov{bytes, capacity};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n = ::recvmsg(socket, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0) return errno == EWOULDBLOCK ? EAGAIN : errno;
  // Take every descriptor that came, so none leaks, and keep the first (two).
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int received;
      std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (*fd < 0) {
        *fd = received;
      } else if (second != nullptr && *second < 0) {
        *second = received;
      } else {
        ::close(received);
      }
    }
  }
  auto drop = [&] {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
    if (second != nullptr && *second >= 0) ::close(*second);
    if (second != nullptr) *second = -1;
  };
  if (n == 0) {
    drop();
    return ECONNRESET;
  }
  if ((msg.msg_flags & MSG_TRUNC) != 0) {
    drop();
    return EPROTO;
  }
  if ((msg.msg_flags & MSG_CTRUNC) != 0) {
    // The kernel could not install a descriptor the peer sent.
    drop();
    return EMFILE;
  }
  *got = static_cast<std::size_t>(n);
  return 0;
}

int receive_with_fd(int socket, void* bytes, std::size_t length, int* fd) {
  std::size_t got = 0;
  int error = receive_message(socket, bytes, length, &got, fd);
  if (error == 0 && got != length) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
    return EPROTO;
  }
  return error;
}

int probe_cross_memory(int pid, std::uint64_t addr, std::uint64_t value) {
  std::uint64_t got = 0;
  iovec local{&got, sizeof(got)};
  iovec remote{reinterpret_cast<void*>(addr), sizeof(got)};
  ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
  if (n < 0) return errno;
  if (n != static_cast<ssize_t>(sizeof(got)) || got != value) return EPROTO;
  return 0;
}

std::string cross_memory_hint(int error) {
  if (error == EPERM) {
    return "cross-memory attach (process_vm_readv) was refused: the processes need the same user and ptrace "
           "permission (kernel.yama.ptrace_scope <= 1; containers need CAP_SYS_PTRACE or a seccomp profile that "
           "allows process_vm_readv); or use RDMX_PROVIDER=tcp";
  }
  if (error == ENOSYS)
    return "the kernel lacks cross-memory attach (CONFIG_CROSS_MEMORY_ATTACH); use RDMX_PROVIDER=tcp";
  if (error == ESRCH) return "the peer process no longer exists";
  return "cross-memory attach failed (" + std::string(std::strerror(error)) + "); use RDMX_PROVIDER=tcp";
}

}  // namespace rdmx::shm
