# Precompiled headers for the heavy common headers (docs/building.md).
#
#   berth_precompile(<target> [caf] [protobuf] [grpc] [json] [spdlog] [doctest])
#     precompiles the standard library's common headers and the sets named,
#     for the target's own sources; name only sets whose packages the target
#     links (their include directories and definitions are the target's).
#   berth_precompile(<target> REUSE_FROM <other>)
#     uses <other>'s precompiled header: for executables of one or two
#     sources that link <other> and are compiled with the same flags.
#
# A source that defines doctest's implementation (DOCTEST_CONFIG_IMPLEMENT*)
# before including doctest.h must not see doctest.h precompiled: mark it
# with berth_no_precompile(<source>...).
#
# -DBERTH_PCH=OFF turns them off (a build that checks each file's own
# includes; ccache still caches).  GCC builds only.
option(BERTH_PCH "Precompile the heavy common headers (CAF, gRPC, protobuf, nlohmann-json, spdlog, doctest)" ON)

set(BERTH_PCH_std <algorithm> <chrono> <cstdint> <functional> <map> <memory> <optional> <set>
                  <string> <unordered_map> <variant> <vector>)
set(BERTH_PCH_protobuf <google/protobuf/message.h> <google/protobuf/repeated_field.h>)
set(BERTH_PCH_caf <caf/actor_system.hpp> <caf/actor_system_config.hpp> <caf/event_based_actor.hpp>
                  <caf/typed_event_based_actor.hpp> <caf/stateful_actor.hpp> <caf/scoped_actor.hpp>
                  <caf/typed_response_promise.hpp> <caf/io/middleman.hpp>)
set(BERTH_PCH_grpc <grpcpp/grpcpp.h>)
set(BERTH_PCH_json <nlohmann/json.hpp>)
set(BERTH_PCH_spdlog <spdlog/spdlog.h>)
set(BERTH_PCH_doctest <doctest/doctest.h>)

function(berth_precompile target)
  # GCC only: clang's precompiled headers record the headers' times, which
  # a cached one from another clone would not match (ccache would need
  # -Xclang -fno-pch-timestamp); the clang builds (make fuzz) are rare.
  if(NOT BERTH_PCH OR NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    return()
  endif()
  cmake_parse_arguments(PCH "" "REUSE_FROM" "" ${ARGN})
  if(PCH_REUSE_FROM)
    target_precompile_headers(${target} REUSE_FROM ${PCH_REUSE_FROM})
    return()
  endif()
  set(headers ${BERTH_PCH_std})
  foreach(set IN LISTS PCH_UNPARSED_ARGUMENTS)
    if(NOT DEFINED BERTH_PCH_${set})
      message(FATAL_ERROR "berth_precompile(${target}): no header set '${set}'")
    endif()
    list(APPEND headers ${BERTH_PCH_${set}})
  endforeach()
  target_precompile_headers(${target} PRIVATE ${headers})
endfunction()

function(berth_no_precompile)
  set_source_files_properties(${ARGN} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
endfunction()
