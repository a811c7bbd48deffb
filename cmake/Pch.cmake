# Precompiled headers for the heavy third-party headers (nlohmann/json, fmt, GoogleTest):
# measured on the 2-core CI machine, those headers alone cost 2-3 s of every file's compile,
# and the CI builds three presets of ~150 files from nothing (issue 22: CI under 30 minutes).
# ZOB_PCH defaults to ON without a compiler launcher and OFF with one (ccache, as developers
# build): ccache does not cache files compiled against a precompiled header unless told to, and
# a build without the forced includes proves that every file includes what it uses.
if(CMAKE_CXX_COMPILER_LAUNCHER OR DEFINED ENV{CMAKE_CXX_COMPILER_LAUNCHER})
  set(_zob_pch_default OFF)
else()
  set(_zob_pch_default ON)
endif()
option(ZOB_PCH "Precompile the third-party headers (json, fmt, gtest)" ${_zob_pch_default})
message(STATUS "zob: precompiled headers ${ZOB_PCH}")

# zob_precompile(target [GTEST]): the target's C++ files get json, fmt and the standard
# containers precompiled (and GoogleTest with GTEST); CUDA files are left alone.
function(zob_precompile target)
  if(NOT ZOB_PCH)
    return()
  endif()
  set(headers <string> <vector> <map> <memory> <nlohmann/json.hpp> <fmt/format.h>)
  if("GTEST" IN_LIST ARGN)
    list(APPEND headers <gtest/gtest.h>)
  endif()
  foreach(h IN LISTS headers)
    target_precompile_headers(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:${h}>")
  endforeach()
endfunction()
