# SPDX-License-Identifier: MIT
# CUDA at build time, all optional: librdmx never links against CUDA (the
# driver is loaded at run time, src/services/cuda/driver.cpp), but where nvcc is
# found it compiles the GPU reduction kernels into a fat binary embedded in
# the library, and where cuda.h is found it checks rdmx's declarations of the
# driver API against it. CI has both, so neither can rot.
option(RDMX_CUDA_KERNELS "Build the GPU reduction kernels when nvcc is found" ON)
set(RDMX_CUDA_ARCHS "80;90" CACHE STRING "GPU architectures (sm_XX) the kernels are built for; PTX of the last is added")

find_program(RDMX_NVCC nvcc HINTS $ENV{CUDA_HOME}/bin /usr/local/cuda/bin)
find_path(RDMX_CUDA_INCLUDE cuda.h HINTS $ENV{CUDA_HOME}/include /usr/local/cuda/include)

if(RDMX_CUDA_INCLUDE)
  add_library(rdmx_cuda_abi_check OBJECT ${PROJECT_SOURCE_DIR}/tests/cuda_abi/driver_abi_check.cpp)
  target_include_directories(rdmx_cuda_abi_check PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
  target_include_directories(rdmx_cuda_abi_check SYSTEM PRIVATE ${RDMX_CUDA_INCLUDE})
  target_compile_options(rdmx_cuda_abi_check PRIVATE ${RDMX_WARNINGS})
  message(STATUS "rdmx: cuda.h found (${RDMX_CUDA_INCLUDE}); the driver API declarations are checked against it")
else()
  message(STATUS "rdmx: cuda.h not found; the driver API declarations are not checked (CUDA is loaded at run time)")
endif()

if(NOT RDMX_CUDA_KERNELS)
  message(STATUS "rdmx: GPU reduction kernels off (RDMX_CUDA_KERNELS=OFF)")
  return()
endif()
if(NOT RDMX_NVCC)
  message(STATUS "rdmx: nvcc not found; GPU reduction kernels not built (device-memory reductions will say so)")
  return()
endif()

set(rdmx_cuda_gencode)
set(rdmx_cuda_arch_text)
foreach(arch IN LISTS RDMX_CUDA_ARCHS)
  list(APPEND rdmx_cuda_gencode -gencode arch=compute_${arch},code=sm_${arch})
  string(APPEND rdmx_cuda_arch_text "sm_${arch} ")
  set(rdmx_cuda_last_arch ${arch})
endforeach()
list(APPEND rdmx_cuda_gencode -gencode arch=compute_${rdmx_cuda_last_arch},code=compute_${rdmx_cuda_last_arch})
string(APPEND rdmx_cuda_arch_text "and PTX compute_${rdmx_cuda_last_arch}")

set(rdmx_cuda_source ${PROJECT_SOURCE_DIR}/src/coll/cuda/reduce_kernels.cu)
set(rdmx_cuda_fatbin ${PROJECT_BINARY_DIR}/cuda/reduce_kernels.fatbin)
file(MAKE_DIRECTORY ${PROJECT_BINARY_DIR}/cuda)
# IEEE arithmetic as on the CPU: no fused multiply-add, exact division,
# denormals kept (coll/reduce.hpp promises the same bits on both).
add_custom_command(
  OUTPUT ${rdmx_cuda_fatbin}
  COMMAND ${RDMX_NVCC} -std=c++20 -O3 --fmad=false -prec-div=true -ftz=false -fatbin ${rdmx_cuda_gencode}
          -I${PROJECT_SOURCE_DIR}/src -I${PROJECT_SOURCE_DIR}/include -MD -MF ${rdmx_cuda_fatbin}.d
          -o ${rdmx_cuda_fatbin} ${rdmx_cuda_source}
  DEPENDS ${rdmx_cuda_source}
  DEPFILE ${rdmx_cuda_fatbin}.d
  COMMENT "nvcc: GPU reduction kernels for ${rdmx_cuda_arch_text}"
  VERBATIM)
add_custom_target(rdmx_cuda_kernels DEPENDS ${rdmx_cuda_fatbin})
add_dependencies(rdmx_coll rdmx_cuda_kernels)
set_source_files_properties(${PROJECT_SOURCE_DIR}/src/coll/cuda/kernels.cpp PROPERTIES
  OBJECT_DEPENDS ${rdmx_cuda_fatbin}
  COMPILE_DEFINITIONS "RDMX_CUDA_FATBIN=\"${rdmx_cuda_fatbin}\";RDMX_CUDA_ARCHS=\"${rdmx_cuda_arch_text}\"")
message(STATUS "rdmx: nvcc found (${RDMX_NVCC}); GPU reduction kernels built for ${rdmx_cuda_arch_text}")
