# SPDX-License-Identifier: BSD-3-Clause
# Install rules (included from the top-level CMakeLists.txt). Components, which
# the Debian packages follow (cmake/packaging.cmake):
#   runtime  libremora.so.0                                   -> libremora0
#   dev      headers, libremora.so, libremora.a, remora.pc,
#            CMake package files                              -> libremora-dev
#   tools    bin/remora, remora(1), bash completion           -> remora
#   kiro     libkiro.so.0 (compat/kiro)                       -> libkiro0
#   kiro-dev kiro headers, libkiro.so, kiro.pc                -> libkiro-dev

# REMORA_PC_PREFIX, the relocatable prefix of the .pc files, is set in the
# top-level CMakeLists.txt (compat/kiro uses it too).

install(DIRECTORY include/remora DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev)
install(TARGETS remora remora_static EXPORT remoraTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
install(EXPORT remoraTargets NAMESPACE remora:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/remora
        COMPONENT dev)
include(CMakePackageConfigHelpers)
configure_package_config_file(cmake/remoraConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/remoraConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/remora)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/remoraConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/remoraConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/remoraConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/remora COMPONENT dev)
configure_file(cmake/remora.pc.in ${CMAKE_CURRENT_BINARY_DIR}/remora.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/remora.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
        COMPONENT dev)

# The command's man page and bash completion.
install(FILES docs/man/remora.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT tools)
install(FILES tools/completion/remora.bash DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
        RENAME remora COMPONENT tools)

# Documentation for users.
install(FILES README.md LICENSE docs/guide.md docs/performance.md docs/protocol.md docs/security.md
              docs/ring.md docs/stream.md docs/python.md docs/gpunet.md docs/kiro.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT tools)
