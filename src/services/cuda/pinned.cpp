// SPDX-License-Identifier: MIT
#include "services/cuda/pinned.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <new>
#include <utility>

#include "services/cuda/context.hpp"
#include "services/cuda/driver.hpp"
#include "services/log.hpp"

namespace rdmx::core::cuda {

namespace {
constexpr unsigned kRegisterPortable = 1;  // CU_MEMHOSTREGISTER_PORTABLE
}  // namespace

PinnedBuffer::PinnedBuffer(std::size_t bytes) : size_(bytes) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  mapped_ = (std::max<std::size_t>(bytes, 1) + page - 1) / page * page;
  // Page-aligned and not zeroed up front: every byte read from it was copied in first.
  void* p = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  data_ = static_cast<char*>(p);
}

PinnedBuffer::~PinnedBuffer() { release(); }

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, 0)),
      pinned_device_(std::exchange(other.pinned_device_, -1)),
      tried_(std::exchange(other.tried_, false)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
    pinned_device_ = std::exchange(other.pinned_device_, -1);
    tried_ = std::exchange(other.tried_, false);
  }
  return *this;
}

void PinnedBuffer::pin(int device) noexcept {
  if (tried_ || data_ == nullptr) return;
  tried_ = true;
  const DriverApi* api = driver_if_loaded();
  if (api == nullptr) return;
  CUresult result = kSuccess;
  try {
    ContextScope scope(*api, primary_context(*api, device));
    result = api->cuMemHostRegister_v2(data_, mapped_, kRegisterPortable);
  } catch (const Error& e) {
    RDMX_INFO("a %zu-byte host buffer for device memory stays pageable (copies are slower): %s", size_, e.what());
    return;
  }
  if (result == kSuccess) {
    pinned_device_ = device;
    return;
  }
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    RDMX_INFO("host buffers for device memory stay pageable (copies are slower): cuMemHostRegister of %zu bytes: %s",
              mapped_, describe(*api, result).c_str());
  }
}

char* PinnedBuffer::ready(std::size_t bytes, int device) {
  if (data_ == nullptr) *this = PinnedBuffer(bytes);
  pin(device);
  return data_;
}

void PinnedBuffer::release() noexcept {
  if (data_ == nullptr) return;
  if (pinned_device_ >= 0) {
    if (const DriverApi* api = driver_if_loaded(); api != nullptr) {
      try {
        ContextScope scope(*api, primary_context(*api, pinned_device_));
        api->cuMemHostUnregister(data_);
      } catch (...) {
        // The context could not be had (the process is tearing CUDA down): the pages go with the mapping.
      }
    }
  }
  ::munmap(data_, mapped_);
  data_ = nullptr;
  pinned_device_ = -1;
}

}  // namespace rdmx::core::cuda
