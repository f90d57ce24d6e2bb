# Precompiled LibTorch headers (docs/architecture.md "Build time").
#
# Parsing <torch/script.h> alone takes about 13 s of the ~20 s that a typical translation unit
# takes to compile; with ~200 of them, a build from scratch spent most of its time re-reading the
# same headers. GCC's precompiled header cuts that part to about a second. GCC uses a precompiled
# header only where the macros it depends on are defined alike (it warns otherwise:
# -Winvalid-pch, which CMake adds), so:
#   - each library that includes LibTorch precompiles it once for its own flags
#     (mlip_precompile_torch), and
#   - the tests that include LibTorch share one header precompiled with their flags
#     (mlip_test_pch in tests/CMakeLists.txt, mlip_reuse_test_pch).
# MLIP_PRECOMPILED_HEADERS=OFF compiles without them (the same objects, more slowly).
option(MLIP_PRECOMPILED_HEADERS "Precompile LibTorch's headers (a build from scratch in about half the time)" ON)

# mlip_precompile_torch(<target> [extra headers...]): precompile <torch/script.h> (and the extra
# headers, e.g. <gtest/gtest.h>) for the C++ sources of <target>.
function(mlip_precompile_torch target)
  if(NOT MLIP_PRECOMPILED_HEADERS)
    return()
  endif()
  set(_headers "<torch/script.h>" ${ARGN})
  foreach(_header IN LISTS _headers)
    target_precompile_headers(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:${_header}>")
  endforeach()
endfunction()
