# `cmake --install`: the public headers (include/gradsync), the core library and, when built,
# the MPI transport; a CMake package (find_package(gradsync) gives gradsync::core and
# gradsync::mpi) and a pkg-config file (gradsync.pc: the core). docs/api.md shows both in use;
# tests/install/ builds examples/ against an installed copy.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(gradsync_installed_targets gradsync_core)
if(GRADSYNC_WITH_MPI)
  list(APPEND gradsync_installed_targets gradsync_mpi)
endif()

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/gradsync DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
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
