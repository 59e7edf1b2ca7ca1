// SPDX-License-Identifier: MIT
// Whether a range of this process's address space is mapped with the access
// a registration asks for. ibv_reg_mr pins the pages through the kernel,
// which refuses a range with a hole or without the needed protection
// (EFAULT); the software providers pin nothing, so without this check a
// registration of memory the process does not have would let a peer's READ
// return whatever lies beyond the buffer, or a WRITE fault the owner.
#pragma once

#include <cstddef>
#include <string>

namespace rdmx::core {

// Empty when every byte of [addr, addr + length) is mapped readable (and
// writable when `need_write`); otherwise what is wrong with the first part
// that is not, e.g. "0x1000 to 0x7f0000000000 is not mapped" or
// "0x7f12...000 to 0x7f12...000 is mapped r--p (/usr/lib/libc.so.6), without
// write access". Reads /proc/self/maps.
std::string mapping_problem(const void* addr, std::size_t length, bool need_write);

}  // namespace rdmx::core
