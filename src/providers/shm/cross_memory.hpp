// SPDX-License-Identifier: MIT
// Whole copies between this process and a peer's memory (cross-memory
// attach). One process_vm_readv/writev moves at most MAX_RW_COUNT bytes
// (INT_MAX rounded down to a page, 2147479552 on 4 KiB pages) and returns a
// short count for the rest, so a 2 GiB message, which max_msg_size allows,
// needs a second call.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstdint>

namespace rdmx::shm {

// Copies the bytes `remote` lists in process `pid` into `local` (read) or
// `local` into `remote` (write), calling again after each short count until
// every byte moved. Returns the bytes moved: `length` on success, fewer when
// a later call moved nothing (errno set if it failed), -1 with errno when the
// first call failed. Both lists must cover `length` bytes.
ssize_t read_from_process(pid_t pid, const iovec* local, int local_count, const iovec* remote, int remote_count,
                          std::uint64_t length);
ssize_t write_to_process(pid_t pid, const iovec* local, int local_count, const iovec* remote, int remote_count,
                         std::uint64_t length);

// The part of an iovec list from byte `skip` on; `out` holds `count` entries.
int tail_iovecs(const iovec* in, int count, std::uint64_t skip, iovec* out);

}  // namespace rdmx::shm
