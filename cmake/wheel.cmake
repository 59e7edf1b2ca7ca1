# SPDX-License-Identifier: MIT
# The wheel scikit-build-core makes (pyproject.toml; SKBUILD is set): the
# Python package and its modules at the top of site-packages (the rules in
# python/CMakeLists.txt, RDMX_PYTHON_INSTALL_DIR "."), librdmx beside them in
# rdmx/lib, and the rdmx command in the wheel's scripts, which pip puts on the
# environment's bin/. No headers, CMake package or pkg-config file: those are
# make install's (cmake/install.cmake).
if(NOT RDMX_TORCH_BUILT)
  message(FATAL_ERROR "rdmx: the wheel holds the torch backend, which is not built for ${RDMX_PYTHON_EXECUTABLE} "
                      "(the messages above say why); pip builds it against torch==2.15.* (pyproject.toml)")
endif()

# One file, named as the modules and the command ask for it (the soname): a
# wheel has no symbolic links, and install(TARGETS) would add two of them
# (librdmx.so, librdmx.so.0), each stored as another copy of the library.
install(FILES $<TARGET_FILE:rdmx> DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RENAME ${CMAKE_SHARED_LIBRARY_PREFIX}rdmx${CMAKE_SHARED_LIBRARY_SUFFIX}.${PROJECT_VERSION_MAJOR})

# pip installs scripts into the environment's bin/ and the package into its
# site-packages, lib/python3.X/site-packages under the same prefix (a
# virtual environment, --user, a prefix); Debian's own pip puts packages in
# lib/python3/dist-packages, the second entry.
execute_process(COMMAND ${RDMX_PYTHON_EXECUTABLE} -c [=[
import sys, sysconfig
paths = {"platbase": "/prefix", "base": "/prefix"}
sys.stdout.write(sysconfig.get_path("scripts", "posix_prefix", vars=paths) + ";"
                 + sysconfig.get_path("platlib", "posix_prefix", vars=paths))
]=] OUTPUT_VARIABLE scheme)
list(GET scheme 0 scripts_dir)
list(GET scheme 1 platlib_dir)
file(RELATIVE_PATH scripts_to_lib ${scripts_dir} ${platlib_dir}/${CMAKE_INSTALL_LIBDIR})
file(RELATIVE_PATH scripts_to_debian_lib ${scripts_dir} /prefix/lib/python3/dist-packages/${CMAKE_INSTALL_LIBDIR})
set_target_properties(rdmx_cli PROPERTIES INSTALL_RPATH "$ORIGIN/${scripts_to_lib};$ORIGIN/${scripts_to_debian_lib}")
install(TARGETS rdmx_cli RUNTIME DESTINATION ${SKBUILD_SCRIPTS_DIR})
message(STATUS "rdmx: wheel: the rdmx command finds librdmx at $ORIGIN/${scripts_to_lib}")
