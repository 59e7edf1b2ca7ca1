// SPDX-License-Identifier: MIT
#include "providers/shm/cross_memory.hpp"

#include <vector>

namespace rdmx::shm {

int tail_iovecs(const iovec* in, int count, std::uint64_t skip, iovec* out) {
  int n = 0;
  for (int i = 0; i < count; ++i) {
    if (skip >= in[i].iov_len) {
      skip -= in[i].iov_len;
      continue;
    }
    out[n++] = {static_cast<char*>(in[i].iov_base) + skip, in[i].iov_len - skip};
    skip = 0;
  }
  return n;
}

namespace {

using CrossCopy = ssize_t (*)(pid_t, const iovec*, unsigned long, const iovec*, unsigned long, unsigned long);

ssize_t copy_all(CrossCopy call, pid_t pid, const iovec* local, int local_count, const iovec* remote, int remote_count,
                 std::uint64_t length) {
  ssize_t n =
      call(pid, local, static_cast<unsigned long>(local_count), remote, static_cast<unsigned long>(remote_count), 0);
  if (n < 0 || static_cast<std::uint64_t>(n) >= length) return n;
  // A short count: the rest from where the kernel stopped. Each further call
  // moves at least a page or ends the loop, so it is bounded by length.
  std::vector<iovec> local_rest(static_cast<std::size_t>(local_count));
  std::vector<iovec> remote_rest(static_cast<std::size_t>(remote_count));
  std::uint64_t done = static_cast<std::uint64_t>(n);
  while (done < length) {
    const int lc = tail_iovecs(local, local_count, done, local_rest.data());
    const int rc = tail_iovecs(remote, remote_count, done, remote_rest.data());
    const ssize_t more = call(pid, local_rest.data(), static_cast<unsigned long>(lc), remote_rest.data(),
                              static_cast<unsigned long>(rc), 0);
    if (more <= 0) break;  // errno, if any, says why the rest could not move
    done += static_cast<std::uint64_t>(more);
  }
  return static_cast<ssize_t>(done);
}

}  // namespace

ssize_t read_from_process(pid_t pid, const iovec* local, int local_count, const iovec* remote, int remote_count,
                          std::uint64_t length) {
  return copy_all(::process_vm_readv, pid, local, local_count, remote, remote_count, length);
}

ssize_t write_to_process(pid_t pid, const iovec* local, int local_count, const iovec* remote, int remote_count,
                         std::uint64_t length) {
  return copy_all(::process_vm_writev, pid, local, local_count, remote, remote_count, length);
}

}  // namespace rdmx::shm
