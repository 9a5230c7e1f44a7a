# What makes a build cheap (docs/building.md): a compiler cache every build
# directory and every clone on the machine shares, a faster linker, less
# debug information by default.  Each is used when present and can be
# turned off; a machine without ccache or mold builds the same binaries.

# --- Compiler cache ---------------------------------------------------------
# ccache through CMake's compiler launcher.  The settings ride in the
# launcher's environment, so they hold for every build directory of this
# tree (build, build-asan, build-tsan) whatever ~/.config/ccache says:
# - base_dir: absolute paths under the source tree are rewritten relative to
#   the compile's directory, so a clone elsewhere hashes the same command;
# - the source tree is mapped to "." in the debug information
#   (-fdebug-prefix-map), and ccache hashes the mapped working directory, so
#   the cached objects carry no clone's path and clones share them;
# - sloppiness for precompiled headers (pch_defines, time_macros) and for
#   the headers' times, which a fresh clone always changes;
# - one cache for the machine (~/.cache/ccache, ccache's default, or
#   $CCACHE_DIR), large enough for the default and both sanitizer builds.
option(BERTH_CCACHE "Compile through ccache when it is installed" ON)
set(BERTH_CCACHE_MAXSIZE "25G" CACHE STRING "ccache's max_size for berth's builds")
find_program(BERTH_CCACHE_PROGRAM ccache)
if(BERTH_CCACHE AND BERTH_CCACHE_PROGRAM AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(berth_ccache_env
    CCACHE_BASEDIR=${CMAKE_SOURCE_DIR}
    CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
    CCACHE_MAXSIZE=${BERTH_CCACHE_MAXSIZE}
    CCACHE_COMPRESS=true)
  set(CMAKE_CXX_COMPILER_LAUNCHER ${CMAKE_COMMAND} -E env ${berth_ccache_env} ${BERTH_CCACHE_PROGRAM})
  set(CMAKE_C_COMPILER_LAUNCHER ${CMAKE_CXX_COMPILER_LAUNCHER})
  message(STATUS "berth: compiling through ${BERTH_CCACHE_PROGRAM} (base dir ${CMAKE_SOURCE_DIR})")
endif()
# Debug information names files relative to the source tree (gdb: run it
# from the tree, or `directory /path/to/berth`).
add_compile_options(-fdebug-prefix-map=${CMAKE_SOURCE_DIR}=.)

# --- Linker -----------------------------------------------------------------
# mold (Debian's), else lld, else the default: linking berthd with ld.bfd
# and full debug information took most of a relink.
set(BERTH_LINKER "auto" CACHE STRING "Linker: auto (mold, else lld, else default), mold, lld or default")
set(berth_linker "")
if(BERTH_LINKER STREQUAL "auto")
  find_program(BERTH_MOLD_PROGRAM mold)
  find_program(BERTH_LLD_PROGRAM ld.lld)
  if(BERTH_MOLD_PROGRAM)
    set(berth_linker mold)
  elseif(BERTH_LLD_PROGRAM)
    set(berth_linker lld)
  endif()
elseif(NOT BERTH_LINKER STREQUAL "default")
  set(berth_linker ${BERTH_LINKER})
endif()
if(berth_linker)
  add_link_options(-fuse-ld=${berth_linker})
  message(STATUS "berth: linking with ${berth_linker}")
endif()

# --- Debug information --------------------------------------------------------
# min: -g1 (functions and lines: stacks, perf and the sanitizers' reports
# stay readable; no local variables), the default; full: -g; none.
set(BERTH_DEBUG_INFO "min" CACHE STRING "Debug information: min (-g1), full (-g) or none")
set_property(CACHE BERTH_DEBUG_INFO PROPERTY STRINGS min full none)
if(BERTH_DEBUG_INFO STREQUAL "min")
  set(berth_g -g1)
elseif(BERTH_DEBUG_INFO STREQUAL "full")
  set(berth_g -g)
elseif(BERTH_DEBUG_INFO STREQUAL "none")
  set(berth_g "")
else()
  message(FATAL_ERROR "BERTH_DEBUG_INFO must be min, full or none, not '${BERTH_DEBUG_INFO}'")
endif()
foreach(cfg RELWITHDEBINFO DEBUG)
  string(REGEX REPLACE "(^| )-g[0-9]?( |$)" " " CMAKE_CXX_FLAGS_${cfg} "${CMAKE_CXX_FLAGS_${cfg}}")
  string(REGEX REPLACE "(^| )-g[0-9]?( |$)" " " CMAKE_C_FLAGS_${cfg} "${CMAKE_C_FLAGS_${cfg}}")
  set(CMAKE_CXX_FLAGS_${cfg} "${CMAKE_CXX_FLAGS_${cfg}} ${berth_g}")
  set(CMAKE_C_FLAGS_${cfg} "${CMAKE_C_FLAGS_${cfg}} ${berth_g}")
endforeach()
