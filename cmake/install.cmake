# SPDX-License-Identifier: MIT
# cmake --install build --prefix P: the shared library, the public headers,
# the rdmx and rdmx_store commands, a CMake package (find_package(rdmx) gives
# rdmx::rdmx), rdmx.pc for pkg-config, and the Python package (python/).
include(CMakePackageConfigHelpers)

target_include_directories(rdmx PUBLIC $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
install(TARGETS rdmx EXPORT rdmxTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/rdmx DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp")
install(FILES ${PROJECT_BINARY_DIR}/include/rdmx/version.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/rdmx)

file(RELATIVE_PATH bin_to_lib /prefix/${CMAKE_INSTALL_BINDIR} /prefix/${CMAKE_INSTALL_LIBDIR})
set_target_properties(rdmx_cli rdmx_store PROPERTIES INSTALL_RPATH "$ORIGIN/${bin_to_lib}")
install(TARGETS rdmx_cli rdmx_store RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

set(config_dir ${CMAKE_INSTALL_LIBDIR}/cmake/rdmx)
install(EXPORT rdmxTargets NAMESPACE rdmx:: DESTINATION ${config_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/rdmxConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/rdmxConfig.cmake INSTALL_DESTINATION ${config_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/rdmxConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/rdmxConfig.cmake ${PROJECT_BINARY_DIR}/rdmxConfigVersion.cmake
        DESTINATION ${config_dir})

# pkg-config: the prefix is the one given at install time (cmake --install --prefix).
install(CODE "
  set(PROJECT_VERSION \"${PROJECT_VERSION}\")
  set(CMAKE_INSTALL_LIBDIR \"${CMAKE_INSTALL_LIBDIR}\")
  set(CMAKE_INSTALL_INCLUDEDIR \"${CMAKE_INSTALL_INCLUDEDIR}\")
  configure_file(\"${PROJECT_SOURCE_DIR}/cmake/rdmx.pc.in\" \"${PROJECT_BINARY_DIR}/rdmx.pc\" @ONLY)
  file(INSTALL \"${PROJECT_BINARY_DIR}/rdmx.pc\" DESTINATION \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig\")
")

# Everything the rules above install, as one target: make install builds it
# before cmake --install, which would otherwise stop at the first file a
# partial build (make run builds the rdmx command alone) has not made.
add_custom_target(rdmx_install_set)
get_property(rdmx_python_targets DIRECTORY ${PROJECT_SOURCE_DIR}/python PROPERTY BUILDSYSTEM_TARGETS)
add_dependencies(rdmx_install_set rdmx rdmx_cli rdmx_store ${rdmx_python_targets})
