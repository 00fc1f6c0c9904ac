# `cmake --install`: the public headers (include/gradsync), the core library and, when built,
# the MPI transport and the LibTorch API; a CMake package (find_package(gradsync) gives
# gradsync::core, gradsync::mpi and gradsync::torch) and a pkg-config file (gradsync.pc: the core). docs/api.md shows both in use;
# tests/install/ builds examples/ against an installed copy.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(gradsync_installed_targets gradsync_core)
if(GRADSYNC_WITH_MPI)
  list(APPEND gradsync_installed_targets gradsync_mpi)
endif()
if(GRADSYNC_WITH_TORCH)
  list(APPEND gradsync_installed_targets gradsync_torch)
else()
  set(gradsync_skip_headers PATTERN torch EXCLUDE)
endif()

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/gradsync DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        ${gradsync_skip_headers})
install(TARGETS ${gradsync_installed_targets} EXPORT gradsyncTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
set(gradsync_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/gradsync)
install(EXPORT gradsyncTargets NAMESPACE gradsync:: DESTINATION ${gradsync_cmake_dir})

configure_package_config_file(cmake/gradsyncConfig.cmake.in
  ${PROJECT_BINARY_DIR}/gradsyncConfig.cmake INSTALL_DESTINATION ${gradsync_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/gradsyncConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/gradsyncConfig.cmake
              ${PROJECT_BINARY_DIR}/gradsyncConfigVersion.cmake
        DESTINATION ${gradsync_cmake_dir})

file(RELATIVE_PATH gradsync_pc_to_prefix /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
configure_file(cmake/gradsync.pc.in ${PROJECT_BINARY_DIR}/gradsync.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/gradsync.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
