// Copies between processes' mapped memory: glibc's memcpy while the data fits
// the caches, non-temporal stores above RDMX_SHM_NT_THRESHOLD (they skip the
// read-for-ownership of destination lines that will not be read soon; on this
// project's 2-core VM: 64 MiB memcpy 7.2 GB/s, AVX2 non-temporal 12.7 GB/s).
#pragma once

#include <cstddef>

namespace rdmx::shm {

std::size_t nt_threshold();
void copy_large(void* dst, const void* src, std::size_t n);

}  // namespace rdmx::shm
