// SPDX-License-Identifier: MIT
// The part of the CUDA driver API (cuda.h) rdmx calls, declared here so the
// library builds where CUDA is not installed and loads libcuda.so.1 only at
// run time. Values and layouts are cuda.h's; driver_abi_check.cpp compares
// them with the real header wherever one is found at configure time.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rdmx::core::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;  // as cuda.h declares it on 64-bit hosts
using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUmemGenericAllocationHandle = std::uint64_t;

constexpr CUresult kSuccess = 0;
constexpr CUresult kErrorOutOfMemory = 2;
constexpr CUresult kErrorNotInitialized = 3;
constexpr CUresult kErrorNotReady = 600;

// CUpointer_attribute
constexpr int kPointerMemoryType = 2;
constexpr int kPointerBufferId = 7;
constexpr int kPointerIsManaged = 8;
constexpr int kPointerDeviceOrdinal = 9;
constexpr int kPointerIsLegacyIpcCapable = 10;
constexpr int kPointerAllowedHandleTypes = 14;

// CUmemorytype
constexpr unsigned kMemoryTypeHost = 1;
constexpr unsigned kMemoryTypeDevice = 2;
constexpr unsigned kMemoryTypeUnified = 4;

// CUdevice_attribute
constexpr int kAttrUnifiedAddressing = 41;
constexpr int kAttrVirtualMemoryManagement = 102;
constexpr int kAttrPosixFdHandles = 103;
constexpr int kAttrGpuDirectRdma = 116;
constexpr int kAttrDmaBuf = 124;

// CUmemAllocationHandleType, CUmemRangeHandleType, flags
constexpr int kHandlePosixFd = 1;
constexpr int kRangeHandleDmaBufFd = 1;
constexpr unsigned kIpcLazyEnablePeerAccess = 1;
constexpr unsigned kStreamNonBlocking = 1;
// CUstreamWaitValue_flags
constexpr unsigned kStreamWaitValueGeq = 0;
constexpr unsigned kEventDisableTiming = 2;
constexpr unsigned kHostRegisterPortable = 1;

constexpr std::size_t kIpcHandleSize = 64;
struct CUipcMemHandle {
  char reserved[kIpcHandleSize];
};

// CUmemAllocationProp and the structs inside it.
struct CUmemLocation {
  int type;  // CUmemLocationType: 1 = device
  int id;
};
constexpr int kLocationDevice = 1;
constexpr int kAllocationPinned = 1;  // CUmemAllocationType
struct CUmemAllocationProp {
  int type;
  int requestedHandleTypes;
  CUmemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
};
struct CUmemAccessDesc {
  CUmemLocation location;
  int flags;  // CUmemAccess_flags: 3 = read and write
};
constexpr int kAccessReadWrite = 3;
constexpr int kGranularityMinimum = 0;

// Entry points, by the names libcuda.so.1 exports (cuda.h maps the plain
// names of some to these _v2 symbols).
struct DriverApi {
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int*);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceGetPCIBusId)(char*, int, CUdevice);
  CUresult (*cuDeviceTotalMem_v2)(std::size_t*, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease_v2)(CUdevice);
  CUresult (*cuCtxGetCurrent)(CUcontext*);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuPointerGetAttributes)(unsigned, int*, void**, CUdeviceptr);
  CUresult (*cuMemGetAddressRange_v2)(CUdeviceptr*, std::size_t*, CUdeviceptr);
  CUresult (*cuMemAlloc_v2)(CUdeviceptr*, std::size_t);
  CUresult (*cuMemFree_v2)(CUdeviceptr);
  CUresult (*cuMemAllocHost_v2)(void**, std::size_t);
  CUresult (*cuMemFreeHost)(void*);
  CUresult (*cuMemHostRegister_v2)(void*, std::size_t, unsigned);
  CUresult (*cuMemHostUnregister)(void*);
  CUresult (*cuMemcpy)(CUdeviceptr, CUdeviceptr, std::size_t);
  CUresult (*cuMemcpyAsync)(CUdeviceptr, CUdeviceptr, std::size_t, CUstream);
  CUresult (*cuMemsetD8_v2)(CUdeviceptr, unsigned char, std::size_t);
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamDestroy_v2)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned);
  CUresult (*cuEventCreate)(CUevent*, unsigned);
  CUresult (*cuEventDestroy_v2)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventQuery)(CUevent);
  CUresult (*cuEventSynchronize)(CUevent);
  // Stream memory operations (collectives ordered on a caller's stream).
  CUresult (*cuStreamWaitValue32_v2)(CUstream, CUdeviceptr, unsigned, unsigned);
  CUresult (*cuMemHostGetDevicePointer_v2)(CUdeviceptr*, void*, unsigned);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                             void**, void**);
  // Inter-process sharing: legacy IPC handles (cudaMalloc memory) ...
  CUresult (*cuIpcGetMemHandle)(CUipcMemHandle*, CUdeviceptr);
  CUresult (*cuIpcOpenMemHandle_v2)(CUdeviceptr*, CUipcMemHandle, unsigned);
  CUresult (*cuIpcCloseMemHandle)(CUdeviceptr);
  // ... and the virtual memory management API (cuMemCreate memory).
  CUresult (*cuMemCreate)(CUmemGenericAllocationHandle*, std::size_t, const CUmemAllocationProp*, unsigned long long);
  CUresult (*cuMemRelease)(CUmemGenericAllocationHandle);
  CUresult (*cuMemAddressReserve)(CUdeviceptr*, std::size_t, std::size_t, CUdeviceptr, unsigned long long);
  CUresult (*cuMemAddressFree)(CUdeviceptr, std::size_t);
  CUresult (*cuMemMap)(CUdeviceptr, std::size_t, std::size_t, CUmemGenericAllocationHandle, unsigned long long);
  CUresult (*cuMemUnmap)(CUdeviceptr, std::size_t);
  CUresult (*cuMemSetAccess)(CUdeviceptr, std::size_t, const CUmemAccessDesc*, std::size_t);
  CUresult (*cuMemGetAllocationGranularity)(std::size_t*, const CUmemAllocationProp*, int);
  CUresult (*cuMemRetainAllocationHandle)(CUmemGenericAllocationHandle*, void*);
  CUresult (*cuMemGetAllocationPropertiesFromHandle)(CUmemAllocationProp*, CUmemGenericAllocationHandle);
  CUresult (*cuMemExportToShareableHandle)(void*, CUmemGenericAllocationHandle, int, unsigned long long);
  CUresult (*cuMemImportFromShareableHandle)(CUmemGenericAllocationHandle*, void*, int);
  // GPUDirect RDMA: a dma-buf of device memory for ibv_reg_dmabuf_mr (CUDA >= 11.7).
  CUresult (*cuMemGetHandleForAddressRange)(void*, CUdeviceptr, std::size_t, int, unsigned long long);
};

}  // namespace rdmx::core::cuda
