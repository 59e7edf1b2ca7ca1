// SPDX-License-Identifier: MIT
// A simulated CUDA driver, built as libcuda.so.1 for tests only, so that CI
// (which has no GPU) runs rdmx's device-memory paths end to end: detection,
// registration, staging, IPC between processes and the reduction kernels.
// It keeps what matters to rdmx of a real GPU:
// - device memory is not CPU memory: each allocation is a memfd mapped
//   PROT_NONE at its device address, so a CPU load or store there crashes
//   the test as it would on a GPU; the driver's copies go through a second,
//   private mapping of the same pages;
// - allocations have bounds, and copies or kernels past them fail;
// - IPC handles open only in another process (again in the same process,
//   counted, as driver 580 does), and freeing memory that another process
//   still has open through one (which is undefined on a GPU) aborts the
//   process that frees it;
// - copies and memsets are as synchronous with the host as CUDA documents
//   for each kind of memory, no more (see copy_memory below);
// - VMM allocations export file descriptors; cudaMalloc-style ones do not.
// Kernels are run by name on the CPU with the same element functions the
// real kernels use. Streams, the legacy default stream included, are
// asynchronous, as a GPU's (sim_streams.hpp).
// On the device machine the same tests also run on the real driver.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "coll/reduce_element.hpp"
#include "cuda_sim/sim_streams.hpp"
#include "services/cuda/driver_api.hpp"

namespace {

using namespace rdmx::core::cuda;
namespace element = rdmx::coll::element;

constexpr CUresult kInvalidValue = 1;
constexpr CUresult kOutOfMemory = 2;
constexpr CUresult kInvalidContext = 201;
constexpr CUresult kAlreadyMapped = 208;
constexpr CUresult kInvalidHandle = 400;
constexpr CUresult kNotFound = 500;
constexpr CUresult kNotSupported = 801;
constexpr std::size_t kGranularity = 2 << 20;
constexpr std::size_t kBulkCopy = 64 << 10;                  // pageable copies from this size on are counted
constexpr std::uint64_t kHandleMagic = 0x6d69737864726dull;  // "rdmxsim"

enum class Kind { Device, Imported, Mapped, PinnedHost, RegisteredHost };

struct Allocation {
  Kind kind;
  std::uintptr_t address;  // what the application sees
  std::size_t size;
  char* shadow;  // the driver's own view of device pages
  int memfd;     // device pages (-1 for host memory)
  std::uint64_t id;
  int handle_types = 0;    // cuMemMap'd memory: the export types its cuMemCreate allowed
  bool from_peer = false;  // another process's memory, opened here (IPC or an imported handle)
};

struct VmmHandle {
  int memfd;
  std::size_t size;
  int handle_types;
  bool imported = false;
};

struct State {
  std::mutex mutex;
  std::map<std::uintptr_t, Allocation> allocations;  // by address
  std::map<std::uint64_t, VmmHandle> handles;
  // Legacy IPC handles opened here: handle bytes -> address and how many opens it has.
  std::map<std::string, std::pair<std::uintptr_t, int>> opened_ipc;
  std::uint64_t next_id = 1;
  std::uint64_t peer_copies = 0;      // copies that touched another process's memory
  std::uint64_t pageable_copies = 0;  // bulk copies between device memory and host memory the driver does not know
};
State& state() {
  static State s;
  return s;
}

thread_local CUcontext current = nullptr;
// One context object per process: its address is the handle.
char primary_context;

Allocation* find_locked(std::uintptr_t address) {
  auto& all = state().allocations;
  auto it = all.upper_bound(address);
  if (it == all.begin()) return nullptr;
  --it;
  if (address >= it->first + it->second.size) return nullptr;
  return &it->second;
}

// The CPU address through which the driver touches [address, +bytes), or
// null when the range leaves its allocation.
char* translate_locked(std::uintptr_t address, std::size_t bytes, bool* ok) {
  Allocation* a = find_locked(address);
  *ok = true;
  if (a == nullptr) return reinterpret_cast<char*>(address);  // host memory the driver does not know
  if (bytes > a->size - (address - a->address)) {
    *ok = false;
    return nullptr;
  }
  if (a->shadow == nullptr) return reinterpret_cast<char*>(address);
  return a->shadow + (address - a->address);
}

// Maps `memfd` PROT_NONE at `at` (or anywhere) and privately readable and
// writable elsewhere; records the allocation.
CUresult map_device_locked(int memfd, std::size_t size, void* at, Kind kind, std::uintptr_t* address) {
  void* visible = ::mmap(at, size, PROT_NONE, MAP_SHARED | (at != nullptr ? MAP_FIXED : 0), memfd, 0);
  if (visible == MAP_FAILED) return kOutOfMemory;
  void* shadow = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (shadow == MAP_FAILED) {
    ::munmap(visible, size);
    return kOutOfMemory;
  }
  *address = reinterpret_cast<std::uintptr_t>(visible);
  state().allocations[*address] =
      Allocation{kind, *address, size, static_cast<char*>(shadow), memfd, state().next_id++};
  return kSuccess;
}

int new_memfd(std::size_t size) {
  const int fd = ::memfd_create("rdmx-simulated-gpu", MFD_CLOEXEC);
  if (fd >= 0 && ::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void unmap_locked(Allocation& a, bool keep_reservation) {
  if (a.shadow != nullptr) ::munmap(a.shadow, a.size);
  if (keep_reservation)
    ::mmap(reinterpret_cast<void*>(a.address), a.size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  else
    ::munmap(reinterpret_cast<void*>(a.address), a.size);
}

struct IpcPayload {
  std::uint64_t magic;
  std::int64_t pid;
  std::int64_t memfd;
  std::uint64_t size;
};

// The simulated kernels: rdmx_reduce_<type>_<Op> and rdmx_divide_<type>.
struct Function {
  bool divide;
  std::string type;
  element::Op op;
};

template <element::Op O, class T>
void reduce_loop(T* d, const T* x, const T* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (std::is_floating_point_v<T>)
      d[i] = element::float_op<O>(x[i], y[i]);
    else
      d[i] = element::int_op<O>(x[i], y[i]);
  }
}

template <element::Op O, class Format>
void reduce_half_loop(std::uint16_t* d, const std::uint16_t* x, const std::uint16_t* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) d[i] = element::half_op<O, Format>(x[i], y[i]);
}

// T is the element type, or element::Fp16 / element::Bf16 for 16-bit floats.
template <class T>
void reduce_as(element::Op op, void* dst, const void* a, const void* b, std::size_t n) {
  constexpr bool kHalf = std::is_same_v<T, element::Fp16> || std::is_same_v<T, element::Bf16>;
  using E = std::conditional_t<kHalf, std::uint16_t, T>;
  auto* d = static_cast<E*>(dst);
  const auto* x = static_cast<const E*>(a);
  const auto* y = static_cast<const E*>(b);
  auto run = [&]<element::Op O>() {
    if constexpr (kHalf)
      reduce_half_loop<O, T>(d, x, y, n);
    else
      reduce_loop<O>(d, x, y, n);
  };
  switch (op) {
    case element::Op::Sum: run.template operator()<element::Op::Sum>(); break;
    case element::Op::Prod: run.template operator()<element::Op::Prod>(); break;
    case element::Op::Min: run.template operator()<element::Op::Min>(); break;
    case element::Op::Max: run.template operator()<element::Op::Max>(); break;
  }
}

std::size_t element_size(const std::string& type) {
  if (type == "int8" || type == "uint8") return 1;
  if (type == "float16" || type == "bfloat16") return 2;
  if (type == "int32" || type == "uint32" || type == "float32") return 4;
  return 8;
}

void run_reduce(const Function& f, void* dst, const void* a, const void* b, std::size_t n) {
  const std::string& t = f.type;
  if (t == "int8") reduce_as<std::int8_t>(f.op, dst, a, b, n);
  if (t == "uint8") reduce_as<std::uint8_t>(f.op, dst, a, b, n);
  if (t == "int32") reduce_as<std::int32_t>(f.op, dst, a, b, n);
  if (t == "uint32") reduce_as<std::uint32_t>(f.op, dst, a, b, n);
  if (t == "int64") reduce_as<std::int64_t>(f.op, dst, a, b, n);
  if (t == "uint64") reduce_as<std::uint64_t>(f.op, dst, a, b, n);
  if (t == "float32") reduce_as<float>(f.op, dst, a, b, n);
  if (t == "float64") reduce_as<double>(f.op, dst, a, b, n);
  if (t == "float16") reduce_as<element::Fp16>(f.op, dst, a, b, n);
  if (t == "bfloat16") reduce_as<element::Bf16>(f.op, dst, a, b, n);
}

void run_divide(const Function& f, void* dst, std::size_t n, int divisor) {
  if (f.type == "float32") {
    auto* d = static_cast<float*>(dst);
    for (std::size_t i = 0; i < n; ++i) d[i] = element::float_divide(d[i], static_cast<float>(divisor));
  } else if (f.type == "float64") {
    auto* d = static_cast<double*>(dst);
    for (std::size_t i = 0; i < n; ++i) d[i] = element::float_divide(d[i], static_cast<double>(divisor));
  } else {
    auto* d = static_cast<std::uint16_t*>(dst);
    for (std::size_t i = 0; i < n; ++i)
      d[i] = f.type == "float16" ? element::half_divide<element::Fp16>(d[i], static_cast<float>(divisor))
                                 : element::half_divide<element::Bf16>(d[i], static_cast<float>(divisor));
  }
}

CUdeviceptr as_device(const void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)); }

CUresult run_divide_kernel(const Function& f, void* dst, std::size_t n, int divisor) {
  std::lock_guard lock(state().mutex);
  bool ok_dst = false;
  char* d = translate_locked(reinterpret_cast<std::uintptr_t>(dst), n * element_size(f.type), &ok_dst);
  if (!ok_dst) return kInvalidValue;
  run_divide(f, d, n, divisor);
  return kSuccess;
}

CUresult run_reduce_kernel(const Function& f, void* dst, const void* a, const void* b, std::size_t n) {
  std::lock_guard lock(state().mutex);
  bool ok_dst = false, ok_a = true, ok_b = true;
  const std::size_t bytes = n * element_size(f.type);
  // A kernel reads and writes device memory only: host pointers fault on a GPU.
  for (const void* p : {static_cast<const void*>(dst), a, b}) {
    const Allocation* in = find_locked(reinterpret_cast<std::uintptr_t>(p));
    if (in == nullptr || in->shadow == nullptr) return kInvalidValue;
  }
  char* d = translate_locked(reinterpret_cast<std::uintptr_t>(dst), bytes, &ok_dst);
  const char* x = translate_locked(reinterpret_cast<std::uintptr_t>(a), bytes, &ok_a);
  const char* y = translate_locked(reinterpret_cast<std::uintptr_t>(b), bytes, &ok_b);
  if (!ok_dst || !ok_a || !ok_b) return kInvalidValue;
  run_reduce(f, d, x, y, n);
  return kSuccess;
}

CUresult launched(std::uint64_t queued) { return queued != 0 ? kSuccess : kInvalidHandle; }

// Where a pointer lives, for CUDA's synchronization rules.
enum class Place { Pageable, Pinned, Device };

Place place_locked(std::uintptr_t address) {
  const Allocation* a = find_locked(address);
  if (a == nullptr) return Place::Pageable;
  return a->kind == Kind::PinnedHost || a->kind == Kind::RegisteredHost ? Place::Pinned : Place::Device;
}

CUresult copy_now(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes) {
  std::lock_guard lock(state().mutex);
  bool dst_ok = false, src_ok = false;
  char* to = translate_locked(static_cast<std::uintptr_t>(dst), bytes, &dst_ok);
  const char* from = translate_locked(static_cast<std::uintptr_t>(src), bytes, &src_ok);
  if (!dst_ok || !src_ok) return kInvalidValue;
  std::memmove(to, from, bytes);
  return kSuccess;
}

// cuMemcpy (`async` false, on the legacy stream) and cuMemcpyAsync, with
// CUDA's "API synchronization behavior" for each kind of memory:
// - host to host: done before the call returns;
// - from pageable host memory: the stream is synchronized, the source
//   staged, and the copy to the device lands later (even for cuMemcpy);
// - cuMemcpy from page-locked memory, or to any host memory: it returns
//   once the copy is done;
// - cuMemcpyAsync into pageable memory: it returns once the copy is done;
// - everything else (device to device, cuMemcpyAsync with page-locked
//   memory): queued, and done when the stream gets there.
CUresult copy_memory(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes, CUstream stream, bool async,
                     const char* call) {
  Place to = Place::Pageable, from = Place::Pageable;
  {
    std::lock_guard lock(state().mutex);
    const Allocation* to_allocation = find_locked(static_cast<std::uintptr_t>(dst));
    const Allocation* from_allocation = find_locked(static_cast<std::uintptr_t>(src));
    if ((to_allocation != nullptr && to_allocation->from_peer) ||
        (from_allocation != nullptr && from_allocation->from_peer)) {
      ++state().peer_copies;
    }
    // A real driver copies pageable memory through a bounce buffer of its
    // own, which costs bandwidth on bulk copies (a word or an inline payload
    // costs latency either way).
    if (bytes >= kBulkCopy && (to_allocation == nullptr) != (from_allocation == nullptr)) ++state().pageable_copies;
    bool dst_ok = false, src_ok = false;
    translate_locked(static_cast<std::uintptr_t>(dst), bytes, &dst_ok);
    translate_locked(static_cast<std::uintptr_t>(src), bytes, &src_ok);
    if (!dst_ok || !src_ok) return kInvalidValue;
    to = place_locked(static_cast<std::uintptr_t>(dst));
    from = place_locked(static_cast<std::uintptr_t>(src));
  }
  if (to != Place::Device && from != Place::Device) return copy_now(dst, src, bytes);
  const std::string what = std::string(call) + " of " + std::to_string(bytes) + " B";
  auto result = std::make_shared<CUresult>(kSuccess);
  rdmx::cuda_sim::StreamWork work = [=] { return *result = copy_now(dst, src, bytes); };
  if (from == Place::Pageable) {
    rdmx::cuda_sim::drain(stream, call);
    auto staged =
        std::make_shared<std::vector<char>>(reinterpret_cast<const char*>(static_cast<std::uintptr_t>(src)),
                                            reinterpret_cast<const char*>(static_cast<std::uintptr_t>(src)) + bytes);
    work = [=] {
      std::lock_guard lock(state().mutex);
      bool ok = false;
      char* target = translate_locked(static_cast<std::uintptr_t>(dst), bytes, &ok);
      if (!ok) return *result = kInvalidValue;
      std::memcpy(target, staged->data(), bytes);
      return kSuccess;
    };
  }
  const std::uint64_t queued = rdmx::cuda_sim::enqueue(stream, std::move(work), what);
  if (queued == 0) return kInvalidHandle;
  const bool waits = async ? to == Place::Pageable : from == Place::Pinned || to != Place::Device;
  if (!waits) return kSuccess;
  rdmx::cuda_sim::wait_for(stream, queued, call);
  return *result;
}

}  // namespace

extern "C" {

CUresult cuGetErrorName(CUresult error, const char** name) {
  switch (error) {
    case kSuccess: *name = "CUDA_SUCCESS"; return kSuccess;
    case kInvalidValue: *name = "CUDA_ERROR_INVALID_VALUE"; return kSuccess;
    case kOutOfMemory: *name = "CUDA_ERROR_OUT_OF_MEMORY"; return kSuccess;
    case kInvalidContext: *name = "CUDA_ERROR_INVALID_CONTEXT"; return kSuccess;
    case kAlreadyMapped: *name = "CUDA_ERROR_ALREADY_MAPPED"; return kSuccess;
    case kInvalidHandle: *name = "CUDA_ERROR_INVALID_HANDLE"; return kSuccess;
    case kNotFound: *name = "CUDA_ERROR_NOT_FOUND"; return kSuccess;
    case kNotSupported: *name = "CUDA_ERROR_NOT_SUPPORTED"; return kSuccess;
    default: *name = nullptr; return kInvalidValue;
  }
}
CUresult cuGetErrorString(CUresult error, const char** text) {
  const char* name = nullptr;
  if (cuGetErrorName(error, &name) != kSuccess) return kInvalidValue;
  *text = "reported by rdmx's simulated CUDA driver (tests/cuda_sim)";
  return kSuccess;
}
CUresult cuInit(unsigned) { return kSuccess; }
CUresult cuDriverGetVersion(int* version) {
  *version = 13000;
  return kSuccess;
}
CUresult cuDeviceGetCount(int* count) {
  *count = 1;
  return kSuccess;
}
CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (ordinal != 0) return kInvalidValue;
  *device = 0;
  return kSuccess;
}
CUresult cuDeviceGetName(char* name, int length, CUdevice) {
  std::snprintf(name, static_cast<std::size_t>(length), "rdmx simulated GPU (tests/cuda_sim)");
  return kSuccess;
}
CUresult cuDeviceGetPCIBusId(char* bus_id, int length, CUdevice) {
  std::snprintf(bus_id, static_cast<std::size_t>(length), "0000:00:00.0");
  return kSuccess;
}
CUresult cuDeviceTotalMem_v2(std::size_t* bytes, CUdevice) {
  *bytes = std::size_t{16} << 30;
  return kSuccess;
}
CUresult cuDeviceGetAttribute(int* value, int attribute, CUdevice) {
  *value = attribute == kAttrUnifiedAddressing || attribute == kAttrVirtualMemoryManagement ||
                   attribute == kAttrPosixFdHandles
               ? 1
               : 0;
  return kSuccess;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice) {
  *context = reinterpret_cast<CUcontext>(&primary_context);
  return kSuccess;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice) { return kSuccess; }
CUresult cuCtxGetCurrent(CUcontext* context) {
  *context = current;
  return kSuccess;
}
CUresult cuCtxSetCurrent(CUcontext context) {
  current = context;
  return kSuccess;
}
CUresult cuCtxSynchronize() { return rdmx::cuda_sim::synchronize_all("cuCtxSynchronize"); }

CUresult cuPointerGetAttributes(unsigned count, int* attributes, void** data, CUdeviceptr pointer) {
  std::lock_guard lock(state().mutex);
  const Allocation* a = find_locked(static_cast<std::uintptr_t>(pointer));
  const bool device = a != nullptr && (a->kind == Kind::Device || a->kind == Kind::Imported || a->kind == Kind::Mapped);
  for (unsigned i = 0; i < count; ++i) {
    switch (attributes[i]) {
      case kPointerMemoryType:
        *static_cast<unsigned*>(data[i]) = a == nullptr ? 0 : device ? kMemoryTypeDevice : kMemoryTypeHost;
        break;
      case kPointerBufferId: *static_cast<unsigned long long*>(data[i]) = a == nullptr ? 0 : a->id; break;
      case kPointerDeviceOrdinal: *static_cast<int*>(data[i]) = a == nullptr ? -2 : 0; break;
      case kPointerIsManaged: *static_cast<int*>(data[i]) = 0; break;
      case kPointerIsLegacyIpcCapable: *static_cast<int*>(data[i]) = a != nullptr && a->kind == Kind::Device; break;
      case kPointerAllowedHandleTypes:
        *static_cast<unsigned long long*>(data[i]) =
            a != nullptr && a->kind == Kind::Mapped ? static_cast<unsigned long long>(a->handle_types) : 0;
        break;
      default: return kInvalidValue;
    }
  }
  return kSuccess;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, std::size_t* size, CUdeviceptr pointer) {
  std::lock_guard lock(state().mutex);
  const Allocation* a = find_locked(static_cast<std::uintptr_t>(pointer));
  if (a == nullptr || a->kind == Kind::PinnedHost || a->kind == Kind::RegisteredHost) return kNotFound;
  *base = a->address;
  *size = a->size;
  return kSuccess;
}

CUresult cuMemAlloc_v2(CUdeviceptr* pointer, std::size_t bytes) {
  if (bytes == 0) return kInvalidValue;
  const std::size_t size = (bytes + 511) / 512 * 512;
  const int fd = new_memfd(size);
  if (fd < 0) return kOutOfMemory;
  std::lock_guard lock(state().mutex);
  std::uintptr_t address = 0;
  if (const CUresult r = map_device_locked(fd, size, nullptr, Kind::Device, &address); r != kSuccess) {
    ::close(fd);
    return r;
  }
  *pointer = address;
  return kSuccess;
}

CUresult cuMemFree_v2(CUdeviceptr pointer) {
  std::lock_guard lock(state().mutex);
  auto it = state().allocations.find(static_cast<std::uintptr_t>(pointer));
  if (it == state().allocations.end() || it->second.kind != Kind::Device) return kInvalidValue;
  struct flock probe {};
  probe.l_type = F_WRLCK;
  probe.l_whence = SEEK_SET;
  if (::fcntl(it->second.memfd, F_OFD_GETLK, &probe) == 0 && probe.l_type != F_UNLCK) {
    std::fprintf(stderr,
                 "simulated CUDA driver: cuMemFree(0x%llx) of %zu bytes that another process still has open "
                 "through a legacy IPC handle (undefined behaviour on a GPU): aborting\n",
                 static_cast<unsigned long long>(pointer), it->second.size);
    std::abort();
  }
  unmap_locked(it->second, false);
  ::close(it->second.memfd);
  state().allocations.erase(it);
  return kSuccess;
}

CUresult cuMemAllocHost_v2(void** pointer, std::size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return kOutOfMemory;
  std::lock_guard lock(state().mutex);
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  state().allocations[address] = Allocation{Kind::PinnedHost, address, bytes, nullptr, -1, state().next_id++};
  *pointer = p;
  return kSuccess;
}

CUresult cuMemFreeHost(void* pointer) {
  std::lock_guard lock(state().mutex);
  auto it = state().allocations.find(reinterpret_cast<std::uintptr_t>(pointer));
  if (it == state().allocations.end() || it->second.kind != Kind::PinnedHost) return kInvalidValue;
  ::munmap(pointer, it->second.size);
  state().allocations.erase(it);
  return kSuccess;
}

CUresult cuMemHostRegister_v2(void* pointer, std::size_t bytes, unsigned) {
  std::lock_guard lock(state().mutex);
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  if (find_locked(address) != nullptr) return kAlreadyMapped;
  state().allocations[address] = Allocation{Kind::RegisteredHost, address, bytes, nullptr, -1, state().next_id++};
  return kSuccess;
}

CUresult cuMemHostUnregister(void* pointer) {
  std::lock_guard lock(state().mutex);
  auto it = state().allocations.find(reinterpret_cast<std::uintptr_t>(pointer));
  if (it == state().allocations.end() || it->second.kind != Kind::RegisteredHost) return kInvalidValue;
  state().allocations.erase(it);
  return kSuccess;
}

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes) {
  return copy_memory(dst, src, bytes, nullptr, false, "cuMemcpy");
}
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes, CUstream stream) {
  return copy_memory(dst, src, bytes, stream, true, "cuMemcpyAsync");
}
// Asynchronous on device memory; synchronous on page-locked host memory
// (CUDA's "API synchronization behavior", memset). Pageable host memory is
// not the GPU's to set.
CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, std::size_t bytes) {
  Place place = Place::Pageable;
  {
    std::lock_guard lock(state().mutex);
    bool ok = false;
    place = place_locked(static_cast<std::uintptr_t>(dst));
    translate_locked(static_cast<std::uintptr_t>(dst), bytes, &ok);
    if (!ok || place == Place::Pageable) return kInvalidValue;
  }
  auto result = std::make_shared<CUresult>(kSuccess);
  const std::uint64_t queued = rdmx::cuda_sim::enqueue(
      nullptr,
      [=] {
        std::lock_guard lock(state().mutex);
        bool ok = false;
        char* to = translate_locked(static_cast<std::uintptr_t>(dst), bytes, &ok);
        if (!ok) return *result = kInvalidValue;
        std::memset(to, value, bytes);
        return kSuccess;
      },
      "cuMemsetD8 of " + std::to_string(bytes) + " B");
  if (queued == 0) return kInvalidHandle;
  if (place == Place::Pinned) {
    rdmx::cuda_sim::wait_for(nullptr, queued, "cuMemsetD8");
    return *result;
  }
  return kSuccess;
}

CUresult cuStreamCreate(CUstream* stream, unsigned flags) {
  *stream = rdmx::cuda_sim::create_stream((flags & kStreamNonBlocking) == 0);
  return kSuccess;
}
CUresult cuStreamDestroy_v2(CUstream stream) {
  rdmx::cuda_sim::destroy_stream(stream);
  return kSuccess;
}
CUresult cuStreamSynchronize(CUstream stream) { return rdmx::cuda_sim::synchronize(stream, "cuStreamSynchronize"); }
CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned) {
  return rdmx::cuda_sim::wait_event(stream, event);
}
CUresult cuEventCreate(CUevent* event, unsigned) {
  *event = rdmx::cuda_sim::create_event();
  return kSuccess;
}
CUresult cuEventDestroy_v2(CUevent event) {
  rdmx::cuda_sim::destroy_event(event);
  return kSuccess;
}
CUresult cuEventRecord(CUevent event, CUstream stream) { return rdmx::cuda_sim::record(event, stream); }
CUresult cuEventQuery(CUevent event) { return rdmx::cuda_sim::query(event); }
CUresult cuEventSynchronize(CUevent event) { return rdmx::cuda_sim::synchronize_event(event); }
// The GPU reaches the word only in device memory or in page-locked host
// memory mapped for it, 4-byte aligned; pageable memory is refused.
std::uint32_t* stream_word(CUdeviceptr address) {
  std::lock_guard lock(state().mutex);
  if (address % 4 != 0 || place_locked(static_cast<std::uintptr_t>(address)) == Place::Pageable) return nullptr;
  bool ok = false;
  return reinterpret_cast<std::uint32_t*>(translate_locked(static_cast<std::uintptr_t>(address), 4, &ok));
}
CUresult cuStreamWaitValue32_v2(CUstream stream, CUdeviceptr address, unsigned value, unsigned flags) {
  const std::uint32_t* word = stream_word(address);
  if (word == nullptr) return kInvalidValue;
  return rdmx::cuda_sim::wait_value(stream, word, value, flags);
}
CUresult cuStreamWriteValue32_v2(CUstream stream, CUdeviceptr address, unsigned value, unsigned) {
  std::uint32_t* word = stream_word(address);
  if (word == nullptr) return kInvalidValue;
  return rdmx::cuda_sim::write_value(stream, word, value);
}
// Pinned host memory is at the same address for the GPU (unified addressing).
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* device, void* host, unsigned) {
  std::lock_guard lock(state().mutex);
  const Allocation* a = find_locked(reinterpret_cast<std::uintptr_t>(host));
  if (a == nullptr || (a->kind != Kind::PinnedHost && a->kind != Kind::RegisteredHost)) return kInvalidValue;
  *device = reinterpret_cast<std::uintptr_t>(host);
  return kSuccess;
}

CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  // A CUDA fat binary starts with its magic number.
  std::uint32_t magic = 0;
  std::memcpy(&magic, image, sizeof magic);
  if (magic != 0xBA55ED50u) return kInvalidValue;
  *module = reinterpret_cast<CUmodule>(new char);
  return kSuccess;
}

CUresult cuModuleGetFunction(CUfunction* function, CUmodule, const char* name) {
  const std::string n = name;
  auto* f = new Function{};
  if (n.rfind("rdmx_divide_", 0) == 0) {
    f->divide = true;
    f->type = n.substr(12);
  } else if (n.rfind("rdmx_reduce_", 0) == 0) {
    const std::string rest = n.substr(12);
    const std::size_t cut = rest.rfind('_');
    f->type = rest.substr(0, cut);
    const std::string op = rest.substr(cut + 1);
    f->op = op == "Sum"    ? element::Op::Sum
            : op == "Prod" ? element::Op::Prod
            : op == "Min"  ? element::Op::Min
                           : element::Op::Max;
  } else {
    delete f;
    return kNotFound;
  }
  *function = reinterpret_cast<CUfunction>(f);
  return kSuccess;
}

// The arguments are read at launch, as a GPU's driver copies them; the
// kernel runs when the stream gets to it.
CUresult cuLaunchKernel(CUfunction function, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        CUstream stream, void** args, void**) {
  const auto& f = *reinterpret_cast<const Function*>(function);
  if (f.divide) {
    void* dst = *static_cast<void**>(args[0]);
    const std::size_t n = *static_cast<std::size_t*>(args[1]);
    const int divisor = *static_cast<int*>(args[2]);
    return launched(rdmx::cuda_sim::enqueue(
        stream, [&f, dst, n, divisor] { return run_divide_kernel(f, dst, n, divisor); }, "rdmx_divide kernel"));
  }
  void* dst = *static_cast<void**>(args[0]);
  const void* a = *static_cast<const void**>(args[1]);
  const void* b = *static_cast<const void**>(args[2]);
  const std::size_t n = *static_cast<std::size_t*>(args[3]);
  return launched(rdmx::cuda_sim::enqueue(
      stream, [&f, dst, a, b, n] { return run_reduce_kernel(f, dst, a, b, n); }, "rdmx_reduce kernel"));
}

CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr pointer) {
  std::lock_guard lock(state().mutex);
  const Allocation* a = find_locked(static_cast<std::uintptr_t>(pointer));
  if (a == nullptr || a->kind != Kind::Device) return kInvalidValue;
  const IpcPayload payload{kHandleMagic, ::getpid(), a->memfd, a->size};
  std::memset(handle, 0, sizeof *handle);
  std::memcpy(handle->reserved, &payload, sizeof payload);
  return kSuccess;
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pointer, CUipcMemHandle handle, unsigned) {
  IpcPayload payload{};
  std::memcpy(&payload, handle.reserved, sizeof payload);
  if (payload.magic != kHandleMagic) return kInvalidValue;
  // As the real driver: not in the process that exported it.
  if (payload.pid == ::getpid()) return kInvalidContext;
  const std::string key(handle.reserved, sizeof handle.reserved);
  std::lock_guard lock(state().mutex);
  // Driver 580 (CUDA 13) opens a handle again in the same process; the
  // opens are counted and each one is closed. Older drivers refused it.
  if (auto it = state().opened_ipc.find(key); it != state().opened_ipc.end()) {
    ++it->second.second;
    *pointer = it->second.first;
    return kSuccess;
  }
  const std::string path = "/proc/" + std::to_string(payload.pid) + "/fd/" + std::to_string(payload.memfd);
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return kInvalidHandle;
  // Held on this open file until the import is closed or this process
  // exits, so the exporter's cuMemFree can tell whether anyone has it open.
  struct flock reading {};
  reading.l_type = F_RDLCK;
  reading.l_whence = SEEK_SET;
  if (::fcntl(fd, F_OFD_SETLK, &reading) != 0) {
    ::close(fd);
    return kInvalidHandle;
  }
  std::uintptr_t address = 0;
  if (const CUresult r = map_device_locked(fd, payload.size, nullptr, Kind::Imported, &address); r != kSuccess) {
    ::close(fd);
    return r;
  }
  state().allocations[address].from_peer = true;
  state().opened_ipc[key] = {address, 1};
  *pointer = address;
  return kSuccess;
}

CUresult cuIpcCloseMemHandle(CUdeviceptr pointer) {
  std::lock_guard lock(state().mutex);
  auto it = state().allocations.find(static_cast<std::uintptr_t>(pointer));
  if (it == state().allocations.end() || it->second.kind != Kind::Imported) return kInvalidValue;
  for (auto opened = state().opened_ipc.begin(); opened != state().opened_ipc.end(); ++opened) {
    if (opened->second.first != it->first) continue;
    if (--opened->second.second > 0) return kSuccess;
    state().opened_ipc.erase(opened);
    break;
  }
  unmap_locked(it->second, false);
  ::close(it->second.memfd);
  state().allocations.erase(it);
  return kSuccess;
}

CUresult cuMemGetAllocationGranularity(std::size_t* granularity, const CUmemAllocationProp*, int) {
  *granularity = kGranularity;
  return kSuccess;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, std::size_t size, const CUmemAllocationProp* prop,
                     unsigned long long) {
  if (size == 0 || size % kGranularity != 0 || prop->location.id != 0) return kInvalidValue;
  const int fd = new_memfd(size);
  if (fd < 0) return kOutOfMemory;
  std::lock_guard lock(state().mutex);
  const std::uint64_t id = state().next_id++;
  state().handles[id] = VmmHandle{fd, size, prop->requestedHandleTypes};
  *handle = id;
  return kSuccess;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  std::lock_guard lock(state().mutex);
  auto it = state().handles.find(handle);
  if (it == state().handles.end()) return kInvalidValue;
  ::close(it->second.memfd);
  state().handles.erase(it);
  return kSuccess;
}

CUresult cuMemAddressReserve(CUdeviceptr* pointer, std::size_t size, std::size_t, CUdeviceptr, unsigned long long) {
  void* p = ::mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return kOutOfMemory;
  *pointer = as_device(p);
  return kSuccess;
}

CUresult cuMemAddressFree(CUdeviceptr pointer, std::size_t size) {
  return ::munmap(reinterpret_cast<void*>(static_cast<std::uintptr_t>(pointer)), size) == 0 ? kSuccess : kInvalidValue;
}

CUresult cuMemMap(CUdeviceptr pointer, std::size_t size, std::size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long) {
  std::lock_guard lock(state().mutex);
  auto it = state().handles.find(handle);
  if (it == state().handles.end() || offset != 0 || size != it->second.size) return kInvalidValue;
  const int fd = ::dup(it->second.memfd);
  std::uintptr_t address = 0;
  const int handle_types = it->second.handle_types;
  const bool imported = it->second.imported;
  const CUresult r = map_device_locked(fd, size, reinterpret_cast<void*>(static_cast<std::uintptr_t>(pointer)),
                                       Kind::Mapped, &address);
  if (r != kSuccess) {
    ::close(fd);
    return r;
  }
  state().allocations[address].handle_types = handle_types;
  state().allocations[address].from_peer = imported;
  return kSuccess;
}

CUresult cuMemUnmap(CUdeviceptr pointer, std::size_t) {
  std::lock_guard lock(state().mutex);
  auto it = state().allocations.find(static_cast<std::uintptr_t>(pointer));
  if (it == state().allocations.end() || it->second.kind != Kind::Mapped) return kInvalidValue;
  unmap_locked(it->second, true);
  ::close(it->second.memfd);
  state().allocations.erase(it);
  return kSuccess;
}

CUresult cuMemSetAccess(CUdeviceptr pointer, std::size_t, const CUmemAccessDesc*, std::size_t) {
  std::lock_guard lock(state().mutex);
  return find_locked(static_cast<std::uintptr_t>(pointer)) != nullptr ? kSuccess : kInvalidValue;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* pointer) {
  std::lock_guard lock(state().mutex);
  const Allocation* a = find_locked(reinterpret_cast<std::uintptr_t>(pointer));
  if (a == nullptr || a->kind != Kind::Mapped) return kInvalidValue;
  const std::uint64_t id = state().next_id++;
  state().handles[id] = VmmHandle{::dup(a->memfd), a->size, a->handle_types};
  *handle = id;
  return kSuccess;
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) {
  std::lock_guard lock(state().mutex);
  if (!state().handles.contains(handle)) return kInvalidValue;
  *prop = CUmemAllocationProp{};
  prop->type = kAllocationPinned;
  prop->requestedHandleTypes = state().handles[handle].handle_types;
  prop->location = {kLocationDevice, 0};
  return kSuccess;
}

CUresult cuMemExportToShareableHandle(void* out, CUmemGenericAllocationHandle handle, int type, unsigned long long) {
  std::lock_guard lock(state().mutex);
  auto it = state().handles.find(handle);
  if (it == state().handles.end() || type != kHandlePosixFd || (it->second.handle_types & kHandlePosixFd) == 0)
    return kInvalidValue;
  *static_cast<int*>(out) = ::dup(it->second.memfd);
  return kSuccess;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* shareable, int type) {
  if (type != kHandlePosixFd) return kInvalidValue;
  const int fd = static_cast<int>(reinterpret_cast<std::intptr_t>(shareable));
  struct stat st {};
  if (::fstat(fd, &st) != 0) return kInvalidHandle;
  std::lock_guard lock(state().mutex);
  const std::uint64_t id = state().next_id++;
  state().handles[id] = VmmHandle{::dup(fd), static_cast<std::size_t>(st.st_size), kHandlePosixFd, true};
  *handle = id;
  return kSuccess;
}

// No NIC to hand a dma-buf to here.
CUresult cuMemGetHandleForAddressRange(void*, CUdeviceptr, std::size_t, int, unsigned long long) {
  return kNotSupported;
}

// Not in any CUDA driver: how many copies touched another process's memory,
// which tests read (through dlsym) to see that a peer's memory was copied
// directly rather than staged.
unsigned long long rdmx_sim_peer_copies() {
  std::lock_guard lock(state().mutex);
  return state().peer_copies;
}

unsigned long long rdmx_sim_pageable_copies() {
  std::lock_guard lock(state().mutex);
  return state().pageable_copies;
}

}  // extern "C"
