// SPDX-License-Identifier: MIT
// Host buffers that device memory is copied through (staging, tcp's
// pieces), page-locked for the GPU once device memory first passes through
// them: the driver copies pageable memory through a bounce buffer of its
// own, a piece at a time, at a fraction of the bus rate, while page-locked
// memory is reached by the copy engines directly.
#pragma once

#include <cstddef>

namespace rdmx::core::cuda {

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  // `bytes` of host memory (pageable until pin()); throws std::bad_alloc.
  explicit PinnedBuffer(std::size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  // Page-locks the buffer for every GPU (cuMemHostRegister, portable),
  // through GPU `device`'s context; once. Where the driver refuses, the
  // buffer stays pageable and copies still work, slower: said once per
  // process at INFO.
  void pin(int device) noexcept;

  // A buffer of `bytes` kept for reuse, made on first use and page-locked
  // for GPU `device`: *this once it exists.
  char* ready(std::size_t bytes, int device);

  char* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  explicit operator bool() const noexcept { return data_ != nullptr; }

 private:
  void release() noexcept;
  char* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t mapped_ = 0;  // whole pages
  int pinned_device_ = -1;
  bool tried_ = false;
};

}  // namespace rdmx::core::cuda
