#include "providers/shm/copy.hpp"

#include <immintrin.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/config.hpp"

namespace rdmx::shm {
namespace {

constexpr std::size_t kDefaultNtThreshold = 16u << 20;

__attribute__((target("avx2"))) void copy_nt_avx2(void* dst, const void* src, std::size_t n) {
  auto* d = static_cast<std::uint8_t*>(dst);
  const auto* s = static_cast<const std::uint8_t*>(src);
  // Align the destination to 32 bytes with an ordinary copy.
  std::size_t head = (32 - (reinterpret_cast<std::uintptr_t>(d) & 31)) & 31;
  if (head > n) head = n;
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  std::size_t blocks = n / 128;
  for (std::size_t i = 0; i < blocks; ++i) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32));
    __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 64));
    __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 96), e);
    s += 128;
    d += 128;
  }
  _mm_sfence();  // streaming stores are weakly ordered: complete them before anything that publishes the copy
  std::memcpy(d, s, n % 128);
}

bool has_avx2() {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
}
}  // namespace

std::size_t nt_threshold() {
  static const std::size_t threshold = [] {
    if (auto v = core::env("RDMX_SHM_NT_THRESHOLD")) {
      char* end = nullptr;
      unsigned long long n = std::strtoull(v->c_str(), &end, 10);
      if (*end == 'K' || *end == 'k') n <<= 10;
      if (*end == 'M' || *end == 'm') n <<= 20;
      return static_cast<std::size_t>(n);
    }
    return kDefaultNtThreshold;
  }();
  return threshold;
}

void copy_large(void* dst, const void* src, std::size_t n) {
  if (n >= nt_threshold() && has_avx2()) {
    copy_nt_avx2(dst, src, n);
  } else {
    std::memcpy(dst, src, n);
  }
}

}  // namespace rdmx::shm
