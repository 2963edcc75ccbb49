# SPDX-License-Identifier: BSD-3-Clause
# Debian packages with CPack (included from the top-level CMakeLists.txt).
#   cpack -G DEB --config BUILD/CPackConfig.cmake   (or: ninja -C BUILD package)
# One package per install component (cmake/install.cmake):
#   libremora0    the shared library
#   libremora-dev headers, libremora.so, libremora.a, remora.pc, CMake package
#   remora        the command, its man page and bash completion, the docs
#   libkiro0      the KIRO compatibility library (its own package: it pulls
#                 in GLib, which remora itself does not need)
#   libkiro-dev   its headers, libkiro.so and kiro.pc
# Dependencies on system libraries come from dpkg-shlibdeps; those between
# these packages are exact versions.

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME remora)
set(CPACK_PACKAGE_VENDOR "remora developers")
set(CPACK_PACKAGE_CONTACT "remora developers <remora@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "remote memory access over UCX: regions, rings, GPU memory")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_DIRECTORY ${PROJECT_BINARY_DIR}/packages)

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev tools)
if(TARGET kiro)
  list(APPEND CPACK_COMPONENTS_ALL kiro kiro-dev)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Our own libraries, for dpkg-shlibdeps to find (their packages are named
# explicitly below).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS
    ${PROJECT_BINARY_DIR}/src ${PROJECT_BINARY_DIR}/compat/kiro)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY "=")

set(_remora_exact "(= ${PROJECT_VERSION})")

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libremora0)
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION
    "remora shared library\n The C library: servers expose memory regions and rings, clients read,\n write and subscribe to them over UCX (TCP, shared memory, verbs, CUDA).")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libremora-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# remora.pc names ucx and libsodium (Requires.private), remoraConfig.cmake
# looks them up with pkg-config, libremora.a needs them to link.
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
    "libremora0 ${_remora_exact}, libucx-dev, libsodium-dev, pkg-config")
set(CPACK_COMPONENT_DEV_DESCRIPTION
    "remora development files\n Headers, the static library, pkg-config and CMake package files\n (find_package(remora)).")

set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME remora)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION net)
set(CPACK_DEBIAN_TOOLS_PACKAGE_DEPENDS "libremora0 ${_remora_exact}")
set(CPACK_COMPONENT_TOOLS_DESCRIPTION
    "remora command-line tool\n remora serve, ls, read, write, ping, bench, stream, info and doctor:\n serve memory regions and rings, move and benchmark them, check GPUDirect.")

set(CPACK_DEBIAN_KIRO_PACKAGE_NAME libkiro0)
set(CPACK_DEBIAN_KIRO_PACKAGE_DEPENDS "libremora0 ${_remora_exact}")
set(CPACK_COMPONENT_KIRO_DESCRIPTION
    "KIRO 1.3 compatible library over remora\n KiroServer, KiroClient, KiroTrb and KiroSb (GObject) on remora.")

set(CPACK_DEBIAN_KIRO-DEV_PACKAGE_NAME libkiro-dev)
set(CPACK_DEBIAN_KIRO-DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_KIRO-DEV_PACKAGE_DEPENDS "libkiro0 ${_remora_exact}, libglib2.0-dev")
set(CPACK_COMPONENT_KIRO-DEV_DESCRIPTION
    "KIRO 1.3 compatible library over remora: development files\n Headers, libkiro.so and kiro.pc.")

include(CPack)
