# SPDX-License-Identifier: MIT
# The layers of src/ (docs/ARCHITECTURE.md draws them). Each layer is an
# object library whose include path holds its own folders and those of the
# layers below it, and nothing else: src/ itself is never on it. A layer's
# folders reach its sources through links under build/layers/<layer>/, so
# `#include "coll/selection.hpp"` in a lower layer fails to build with
# "No such file", and the direction cannot drift.
#
# rdmx_layer(NAME FOLDERS f... [BELOW layer...] [STUB file BUILT bool])
# declares one, in order from the bottom; BELOW names the layers it may
# include (with what they may). A provider that may be left out names its
# STUB: built from that file alone when BUILT is false, without it otherwise.

set(RDMX_LAYERS "")
set(RDMX_LAYER_TABLE "")

function(rdmx_layer name)
  cmake_parse_arguments(L "" "STUB;BUILT" "FOLDERS;BELOW" ${ARGN})
  set(folders ${L_FOLDERS})
  set(reach ${L_FOLDERS})
  foreach(below IN LISTS L_BELOW)
    if(NOT below IN_LIST RDMX_LAYERS)
      message(FATAL_ERROR "rdmx: layer ${name} builds on ${below}, which is not declared below it")
    endif()
    list(APPEND reach ${RDMX_LAYER_REACH_${below}})
  endforeach()
  list(REMOVE_DUPLICATES reach)
  set(root ${PROJECT_BINARY_DIR}/layers/${name})
  file(REMOVE_RECURSE ${root})
  foreach(folder IN LISTS reach)
    # A folder inside another the layer reaches comes with its link.
    set(inside FALSE)
    foreach(other IN LISTS reach)
      string(FIND "${folder}" "${other}/" at)
      if(at EQUAL 0)
        set(inside TRUE)
      endif()
    endforeach()
    if(inside)
      continue()
    endif()
    get_filename_component(parent ${root}/${folder} DIRECTORY)
    file(MAKE_DIRECTORY ${parent})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${folder} ${root}/${folder} SYMBOLIC)
  endforeach()
  set(sources "")
  foreach(folder IN LISTS folders)
    file(GLOB found CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/${folder}/*.cpp)
    list(APPEND sources ${found})
  endforeach()
  if(L_STUB)
    set(stub ${PROJECT_SOURCE_DIR}/src/${L_FOLDERS}/${L_STUB})
    if(L_BUILT)
      list(REMOVE_ITEM sources ${stub})
    else()
      set(sources ${stub})
    endif()
  endif()
  add_library(rdmx_${name} OBJECT ${sources})
  set_target_properties(rdmx_${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  rdmx_unity(rdmx_${name})
  target_include_directories(rdmx_${name} PRIVATE ${root} ${PROJECT_SOURCE_DIR}/include ${PROJECT_BINARY_DIR}/include)
  # Hidden unless a public header declares it (include/rdmx/export.hpp).
  target_compile_options(rdmx_${name} PRIVATE ${RDMX_WARNINGS} -fno-semantic-interposition -fvisibility=hidden
                                               -fvisibility-inlines-hidden)
  target_link_libraries(rdmx_${name} PRIVATE Threads::Threads nlohmann_json::nlohmann_json)
  target_include_directories(rdmx_${name} SYSTEM PRIVATE ${RDMX_HWLOC_INCLUDE})
  if(RDMX_HAVE_VERBS)
    target_compile_definitions(rdmx_${name} PRIVATE RDMX_HAVE_VERBS=1)
    target_include_directories(rdmx_${name} SYSTEM PRIVATE ${RDMX_IBVERBS_INCLUDE})
    if(RDMX_HAVE_IBV_REG_DMABUF_MR)
      target_compile_definitions(rdmx_${name} PRIVATE RDMX_HAVE_IBV_REG_DMABUF_MR=1)
    endif()
  endif()
  set(RDMX_LAYER_REACH_${name} ${reach} PARENT_SCOPE)
  set(RDMX_LAYERS ${RDMX_LAYERS} ${name} PARENT_SCOPE)
  set(RDMX_SOURCES ${RDMX_SOURCES} ${sources} PARENT_SCOPE)
  string(REPLACE ";" " " folder_text "${folders}")
  string(REPLACE ";" " " below_text "${L_BELOW}")
  set(RDMX_LAYER_TABLE "${RDMX_LAYER_TABLE}${name}: ${folder_text} | ${below_text}\n" PARENT_SCOPE)
endfunction()

set(RDMX_SOURCES "")
rdmx_layer(services FOLDERS services services/cuda)
rdmx_layer(topo FOLDERS topo BELOW services)
rdmx_layer(driver FOLDERS driver BELOW services)
rdmx_layer(soft_rc FOLDERS providers/soft_rc BELOW driver services)
rdmx_layer(tcp FOLDERS providers/tcp BELOW soft_rc driver services)
rdmx_layer(shm FOLDERS providers/shm BELOW soft_rc driver services)
rdmx_layer(verbs FOLDERS providers/verbs BELOW driver topo services STUB stub.cpp BUILT ${RDMX_HAVE_VERBS})
rdmx_layer(auto FOLDERS providers/auto BELOW driver services)
rdmx_layer(bootstrap FOLDERS bootstrap BELOW services)
# Who is alive and who failed, agreed without a coordinator (control mesh, heartbeat, agreement).
rdmx_layer(membership FOLDERS membership BELOW bootstrap services)
rdmx_layer(coll FOLDERS coll coll/cuda BELOW services bootstrap membership)
# The vector kernels are compiled for their instruction sets by function
# attributes, and each file defines the same kernel names: never batched.
set_source_files_properties(${PROJECT_SOURCE_DIR}/src/coll/reduce_avx2.cpp ${PROJECT_SOURCE_DIR}/src/coll/reduce_avx512.cpp
                            PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
# The front door reaches providers only through their descriptors: no
# provider's folder is on its path (auto selection composes them).
rdmx_layer(api FOLDERS api BELOW services topo driver auto bootstrap membership coll)

# The providers, in auto selection's order (the first that reaches a peer
# carries its QPs). Each folder exports rdmx::core::provider_<name>
# (src/driver/provider.hpp); the registry gets this list and names none.
set(RDMX_PROVIDER_ORDER shm verbs tcp)
set(rdmx_provider_list ${PROJECT_BINARY_DIR}/layers/provider_list.cpp)
set(text "// Generated by cmake/layers.cmake from RDMX_PROVIDER_ORDER.\n#include \"driver/provider.hpp\"\n\nnamespace rdmx::core {\n")
set(entries "")
foreach(provider IN LISTS RDMX_PROVIDER_ORDER)
  string(APPEND text "extern const ProviderDescriptor provider_${provider};\n")
  string(APPEND entries "&provider_${provider}, ")
endforeach()
string(APPEND text "\nstd::span<const ProviderDescriptor* const> provider_descriptors() {\n"
       "  static const ProviderDescriptor* const list[] = {${entries}};\n  return list;\n}\n\n"
       "}  // namespace rdmx::core\n")
file(CONFIGURE OUTPUT ${rdmx_provider_list} CONTENT "${text}")
target_sources(rdmx_api PRIVATE ${rdmx_provider_list})

# A source outside every layer would not be built at all: refuse it here.
file(GLOB_RECURSE rdmx_all_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/*.cpp)
foreach(source IN LISTS rdmx_all_sources)
  if(NOT source IN_LIST RDMX_SOURCES AND NOT source MATCHES "/src/providers/verbs/")
    file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${source})
    message(FATAL_ERROR "rdmx: ${rel} is in no layer; add its folder to a layer in cmake/layers.cmake")
  endif()
endforeach()
# The table docs/ARCHITECTURE.md shows (Layers.ArchitectureShowsTheBuiltLayers compares them).
file(WRITE ${PROJECT_BINARY_DIR}/layers/table.txt "${RDMX_LAYER_TABLE}")
