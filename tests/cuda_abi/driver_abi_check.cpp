// SPDX-License-Identifier: MIT
// Compiled, never run, wherever cuda.h is found (cmake/cuda.cmake): the
// driver API as src/services/cuda/driver_api.hpp declares it must match the real
// header, constant for constant and layout for layout, and every entry point
// must take arguments of the same sizes, or the build fails here.
#include <cuda.h>

#include <cstddef>
#include <type_traits>

#include "services/cuda/driver_api.hpp"

namespace ours = rdmx::core::cuda;

static_assert(ours::kSuccess == CUDA_SUCCESS);
static_assert(ours::kErrorOutOfMemory == CUDA_ERROR_OUT_OF_MEMORY);
static_assert(ours::kStreamWaitValueGeq == CU_STREAM_WAIT_VALUE_GEQ);
static_assert(ours::kErrorNotInitialized == CUDA_ERROR_NOT_INITIALIZED);
static_assert(ours::kErrorNotReady == CUDA_ERROR_NOT_READY);
static_assert(ours::kPointerMemoryType == CU_POINTER_ATTRIBUTE_MEMORY_TYPE);
static_assert(ours::kPointerBufferId == CU_POINTER_ATTRIBUTE_BUFFER_ID);
static_assert(ours::kPointerIsManaged == CU_POINTER_ATTRIBUTE_IS_MANAGED);
static_assert(ours::kPointerDeviceOrdinal == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL);
static_assert(ours::kPointerIsLegacyIpcCapable == CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE);
static_assert(ours::kPointerAllowedHandleTypes == CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES);
static_assert(ours::kMemoryTypeHost == CU_MEMORYTYPE_HOST);
static_assert(ours::kMemoryTypeDevice == CU_MEMORYTYPE_DEVICE);
static_assert(ours::kMemoryTypeUnified == CU_MEMORYTYPE_UNIFIED);
static_assert(ours::kAttrUnifiedAddressing == CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING);
static_assert(ours::kAttrVirtualMemoryManagement == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED);
static_assert(ours::kAttrPosixFdHandles == CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED);
static_assert(ours::kAttrGpuDirectRdma == CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED);
static_assert(ours::kAttrDmaBuf == CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED);
static_assert(ours::kHandlePosixFd == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
static_assert(ours::kRangeHandleDmaBufFd == CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD);
static_assert(ours::kIpcLazyEnablePeerAccess == CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
static_assert(ours::kStreamNonBlocking == CU_STREAM_NON_BLOCKING);
static_assert(ours::kEventDisableTiming == CU_EVENT_DISABLE_TIMING);
static_assert(ours::kHostRegisterPortable == CU_MEMHOSTREGISTER_PORTABLE);
static_assert(ours::kLocationDevice == CU_MEM_LOCATION_TYPE_DEVICE);
static_assert(ours::kAllocationPinned == CU_MEM_ALLOCATION_TYPE_PINNED);
static_assert(ours::kAccessReadWrite == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
static_assert(ours::kGranularityMinimum == CU_MEM_ALLOC_GRANULARITY_MINIMUM);
static_assert(ours::kIpcHandleSize == CU_IPC_HANDLE_SIZE);

static_assert(std::is_same_v<ours::CUdeviceptr, CUdeviceptr>);
static_assert(sizeof(ours::CUresult) == sizeof(CUresult));
static_assert(sizeof(ours::CUipcMemHandle) == sizeof(CUipcMemHandle));
static_assert(sizeof(ours::CUmemLocation) == sizeof(CUmemLocation));
static_assert(sizeof(ours::CUmemAllocationProp) == sizeof(CUmemAllocationProp));
static_assert(offsetof(ours::CUmemAllocationProp, location) == offsetof(CUmemAllocationProp, location));
static_assert(offsetof(ours::CUmemAllocationProp, win32HandleMetaData) ==
              offsetof(CUmemAllocationProp, win32HandleMetaData));
static_assert(offsetof(ours::CUmemAllocationProp, allocFlags) == offsetof(CUmemAllocationProp, allocFlags));
static_assert(sizeof(ours::CUmemAccessDesc) == sizeof(CUmemAccessDesc));

// Same return size, same number of parameters, each of the same size and kind
// (integer, pointer, enum or struct passed by value), so the call is the same.
template <class T>
constexpr int kind() {
  if constexpr (std::is_pointer_v<T>) return 0;
  if constexpr (std::is_integral_v<T> || std::is_enum_v<T>) return 1;
  return 2;
}
template <class R1, class... A1, class R2, class... A2>
constexpr bool same_call(R1 (*)(A1...), R2 (*)(A2...)) {
  if constexpr (sizeof...(A1) != sizeof...(A2)) {
    return false;
  } else {
    return sizeof(R1) == sizeof(R2) && ((sizeof(A1) == sizeof(A2) && kind<A1>() == kind<A2>()) && ...);
  }
}
#define RDMX_SAME_CALL(name, real) \
  static_assert(same_call(decltype(ours::DriverApi::name){}, &real), #name " differs from cuda.h")
RDMX_SAME_CALL(cuGetErrorName, cuGetErrorName);
RDMX_SAME_CALL(cuGetErrorString, cuGetErrorString);
RDMX_SAME_CALL(cuInit, cuInit);
RDMX_SAME_CALL(cuDriverGetVersion, cuDriverGetVersion);
RDMX_SAME_CALL(cuDeviceGetCount, cuDeviceGetCount);
RDMX_SAME_CALL(cuDeviceGet, cuDeviceGet);
RDMX_SAME_CALL(cuDeviceGetName, cuDeviceGetName);
RDMX_SAME_CALL(cuDeviceGetPCIBusId, cuDeviceGetPCIBusId);
RDMX_SAME_CALL(cuDeviceTotalMem_v2, cuDeviceTotalMem_v2);
RDMX_SAME_CALL(cuDeviceGetAttribute, cuDeviceGetAttribute);
RDMX_SAME_CALL(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain);
RDMX_SAME_CALL(cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease_v2);
RDMX_SAME_CALL(cuCtxGetCurrent, cuCtxGetCurrent);
RDMX_SAME_CALL(cuCtxSetCurrent, cuCtxSetCurrent);
RDMX_SAME_CALL(cuCtxSynchronize, cuCtxSynchronize);
RDMX_SAME_CALL(cuPointerGetAttributes, cuPointerGetAttributes);
RDMX_SAME_CALL(cuMemGetAddressRange_v2, cuMemGetAddressRange_v2);
RDMX_SAME_CALL(cuMemAlloc_v2, cuMemAlloc_v2);
RDMX_SAME_CALL(cuMemFree_v2, cuMemFree_v2);
RDMX_SAME_CALL(cuMemAllocHost_v2, cuMemAllocHost_v2);
RDMX_SAME_CALL(cuMemFreeHost, cuMemFreeHost);
RDMX_SAME_CALL(cuMemHostRegister_v2, cuMemHostRegister_v2);
RDMX_SAME_CALL(cuMemHostUnregister, cuMemHostUnregister);
RDMX_SAME_CALL(cuMemcpy, cuMemcpy);
RDMX_SAME_CALL(cuMemcpyAsync, cuMemcpyAsync);
RDMX_SAME_CALL(cuMemsetD8_v2, cuMemsetD8_v2);
RDMX_SAME_CALL(cuStreamCreate, cuStreamCreate);
RDMX_SAME_CALL(cuStreamDestroy_v2, cuStreamDestroy_v2);
RDMX_SAME_CALL(cuStreamSynchronize, cuStreamSynchronize);
RDMX_SAME_CALL(cuStreamWaitEvent, cuStreamWaitEvent);
RDMX_SAME_CALL(cuEventCreate, cuEventCreate);
RDMX_SAME_CALL(cuEventDestroy_v2, cuEventDestroy_v2);
RDMX_SAME_CALL(cuEventRecord, cuEventRecord);
RDMX_SAME_CALL(cuEventQuery, cuEventQuery);
RDMX_SAME_CALL(cuEventSynchronize, cuEventSynchronize);
RDMX_SAME_CALL(cuStreamWaitValue32_v2, cuStreamWaitValue32_v2);
RDMX_SAME_CALL(cuMemHostGetDevicePointer_v2, cuMemHostGetDevicePointer_v2);
RDMX_SAME_CALL(cuModuleLoadData, cuModuleLoadData);
RDMX_SAME_CALL(cuModuleGetFunction, cuModuleGetFunction);
RDMX_SAME_CALL(cuLaunchKernel, cuLaunchKernel);
RDMX_SAME_CALL(cuIpcGetMemHandle, cuIpcGetMemHandle);
RDMX_SAME_CALL(cuIpcOpenMemHandle_v2, cuIpcOpenMemHandle_v2);
RDMX_SAME_CALL(cuIpcCloseMemHandle, cuIpcCloseMemHandle);
RDMX_SAME_CALL(cuMemCreate, cuMemCreate);
RDMX_SAME_CALL(cuMemRelease, cuMemRelease);
RDMX_SAME_CALL(cuMemAddressReserve, cuMemAddressReserve);
RDMX_SAME_CALL(cuMemAddressFree, cuMemAddressFree);
RDMX_SAME_CALL(cuMemMap, cuMemMap);
RDMX_SAME_CALL(cuMemUnmap, cuMemUnmap);
RDMX_SAME_CALL(cuMemSetAccess, cuMemSetAccess);
RDMX_SAME_CALL(cuMemGetAllocationGranularity, cuMemGetAllocationGranularity);
RDMX_SAME_CALL(cuMemRetainAllocationHandle, cuMemRetainAllocationHandle);
RDMX_SAME_CALL(cuMemGetAllocationPropertiesFromHandle, cuMemGetAllocationPropertiesFromHandle);
RDMX_SAME_CALL(cuMemExportToShareableHandle, cuMemExportToShareableHandle);
RDMX_SAME_CALL(cuMemImportFromShareableHandle, cuMemImportFromShareableHandle);
RDMX_SAME_CALL(cuMemGetHandleForAddressRange, cuMemGetHandleForAddressRange);
