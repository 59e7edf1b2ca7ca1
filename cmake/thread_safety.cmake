# SPDX-License-Identifier: MIT
# Clang's thread-safety analysis over the library (src/services/thread_annotations.hpp):
# every source is parsed by clang with -Wthread-safety as an error, so a
# function named *_locked called without its lock, or data read outside the
# lock that guards it, fails the build. Only parsed (-fsyntax-only), not
# compiled twice: the library itself is still built by the main compiler.
# Part of `all`, so `make build` and `make test` run it; a depfile per source
# keeps it incremental.
option(RDMX_THREAD_SAFETY "Run clang's thread-safety analysis over the library" ON)
if(NOT RDMX_THREAD_SAFETY)
  message(STATUS "rdmx: thread-safety analysis off (RDMX_THREAD_SAFETY=OFF)")
  return()
endif()
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  # The library's own compiler is clang: it checks as it compiles, no second parse.
  set(RDMX_CLANG_CXX ${CMAKE_CXX_COMPILER})
  foreach(layer IN LISTS RDMX_LAYERS)
    target_compile_options(rdmx_${layer} PRIVATE -Wthread-safety -Werror=thread-safety)
  endforeach()
  message(STATUS "rdmx: thread-safety analysis by ${RDMX_CLANG_CXX} as it compiles the library")
else()
  find_program(RDMX_CLANG_CXX NAMES clang++ clang++-19 clang++-18 clang++-17 clang++-16 clang++-15 clang++-14)
  if(NOT RDMX_CLANG_CXX)
    message(STATUS "rdmx: clang++ not found; the thread-safety analysis does not run (scripts/deps.sh installs clang)")
    return()
  endif()
  message(STATUS "rdmx: thread-safety analysis by ${RDMX_CLANG_CXX} (target thread_safety, part of all)")
endif()

set(rdmx_tsa_flags -std=c++20 -fsyntax-only -Wthread-safety -Werror=thread-safety
    -I${PROJECT_SOURCE_DIR}/include -I${PROJECT_BINARY_DIR}/include -I${PROJECT_SOURCE_DIR}/src)
get_target_property(rdmx_tsa_system_dirs nlohmann_json::nlohmann_json INTERFACE_INCLUDE_DIRECTORIES)
list(APPEND rdmx_tsa_system_dirs ${RDMX_HWLOC_INCLUDE})
if(RDMX_HAVE_VERBS)
  list(APPEND rdmx_tsa_flags -DRDMX_HAVE_VERBS=1)
  if(RDMX_HAVE_IBV_REG_DMABUF_MR)
    list(APPEND rdmx_tsa_flags -DRDMX_HAVE_IBV_REG_DMABUF_MR=1)
  endif()
  list(APPEND rdmx_tsa_system_dirs ${RDMX_IBVERBS_INCLUDE})
endif()
# Directories clang searches anyway stay out: -isystem /usr/include would
# reorder libstdc++'s #include_next chain.
list(REMOVE_DUPLICATES rdmx_tsa_system_dirs)
list(REMOVE_ITEM rdmx_tsa_system_dirs /usr/include /usr/local/include)
foreach(dir IN LISTS rdmx_tsa_system_dirs)
  list(APPEND rdmx_tsa_flags -isystem ${dir})
endforeach()

set(rdmx_tsa_stamps)
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  set(rdmx_tsa_sources)
else()
  set(rdmx_tsa_sources ${RDMX_SOURCES})
endif()
foreach(src IN LISTS rdmx_tsa_sources)
  file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${src})
  set(stamp ${PROJECT_BINARY_DIR}/thread-safety/${rel}.checked)
  get_filename_component(stamp_dir ${stamp} DIRECTORY)
  file(MAKE_DIRECTORY ${stamp_dir})
  add_custom_command(
    OUTPUT ${stamp}
    COMMAND ${RDMX_CLANG_CXX} ${rdmx_tsa_flags} -MD -MF ${stamp}.d -MT ${stamp} ${src}
    COMMAND ${CMAKE_COMMAND} -E touch ${stamp}
    DEPENDS ${src}
    DEPFILE ${stamp}.d
    COMMENT "thread-safety analysis: ${rel}"
    VERBATIM)
  list(APPEND rdmx_tsa_stamps ${stamp})
endforeach()
if(rdmx_tsa_stamps)
  add_custom_target(thread_safety ALL DEPENDS ${rdmx_tsa_stamps})
endif()

# The check itself is tested: a file with a lock missing in each of a few
# ways must fail to parse with clang's own message, and the correct version
# must parse cleanly.
if(RDMX_BUILD_TESTS)
  set(rdmx_tsa_case_file ${PROJECT_SOURCE_DIR}/tests/thread_safety/missing_lock.cpp)
  set(rdmx_tsa_cases
      "0|CorrectCodeParses|"
      "1|MissingLockIsAnError|calling function 'add_locked' requires holding mutex 'mutex_'"
      "2|UnguardedWriteIsAnError|writing variable 'count_' requires holding mutex 'mutex_'"
      "3|IgnoredTryLockIsAnError|calling function 'add_locked' requires holding mutex 'mutex_'"
      "4|UseAfterUnlockIsAnError|calling function 'pass_locked' requires holding device lock 'lock_'")
  foreach(entry IN LISTS rdmx_tsa_cases)
    string(REPLACE "|" ";" parts "${entry}")
    list(GET parts 0 case)
    list(GET parts 1 what)
    list(LENGTH parts n)
    set(name ThreadSafety.${what})
    add_test(NAME ${name} COMMAND ${RDMX_CLANG_CXX} ${rdmx_tsa_flags} -DRDMX_CASE=${case} ${rdmx_tsa_case_file})
    set_tests_properties(${name} PROPERTIES LABELS thread_safety)
    if(n GREATER 2)
      # Passes on clang's message for the case (its exit status is then 1).
      list(GET parts 2 message)
      set_tests_properties(${name} PROPERTIES PASS_REGULAR_EXPRESSION "${message}")
    endif()
  endforeach()
endif()
