# Compiles through ccache when it is installed (scripts/setup.sh installs it): rebuilds, the
# sanitizer builds and CI's fresh clones on a machine that built before then cost seconds, not
# minutes. Paths are hashed relative to the source tree, so another clone of the same commit
# hits the same entries; the precompiled torch header needs the pch/time sloppiness settings.
# Depend mode (CCACHE_DEPEND) keys a result on the include files the compiler's own -MD output
# names, so a miss, which is every compile of CI's fresh clone with an empty cache, compiles once
# instead of running the preprocessor first to compute the key (about 5% of a compile here).
# GRADSYNC_CCACHE=OFF, or a CMAKE_CXX_COMPILER_LAUNCHER of your own, turns it off.
option(GRADSYNC_CCACHE "Compile through ccache when it is installed" ON)
find_program(GRADSYNC_CCACHE_PROGRAM ccache)
if(GRADSYNC_CCACHE AND GRADSYNC_CCACHE_PROGRAM AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_CXX_COMPILER_LAUNCHER
      ${CMAKE_COMMAND} -E env CCACHE_BASEDIR=${PROJECT_SOURCE_DIR} CCACHE_NOHASHDIR=1 CCACHE_DEPEND=1
      "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
      ${GRADSYNC_CCACHE_PROGRAM})
endif()
