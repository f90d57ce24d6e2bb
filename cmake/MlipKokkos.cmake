# Finds Kokkos and provides the target mlip_kokkos.
#
# 1. A Kokkos found through its CMake config (a user-built one via Kokkos_ROOT, or a working
#    system one) is used as is, provided its include directory really holds Kokkos_Core.hpp.
# 2. Debian's libtrilinos-kokkos-dev ships a config whose include path points at the
#    non-existent /usr/lib/include; then we fall back to the headers in /usr/include/trilinos
#    and the library libtrilinos_kokkoscore.
find_package(Kokkos CONFIG QUIET)
set(MLIP_KOKKOS_SOURCE "")
if(Kokkos_FOUND AND TARGET Kokkos::kokkos)
  get_target_property(_mlip_kk_inc Kokkos::kokkos INTERFACE_INCLUDE_DIRECTORIES)
  set(_mlip_kk_ok FALSE)
  foreach(_d IN LISTS _mlip_kk_inc)
    if(EXISTS "${_d}/Kokkos_Core.hpp")
      set(_mlip_kk_ok TRUE)
    endif()
  endforeach()
  if(_mlip_kk_ok)
    add_library(mlip_kokkos INTERFACE)
    target_link_libraries(mlip_kokkos INTERFACE Kokkos::kokkos)
    set(MLIP_KOKKOS_SOURCE "config (${Kokkos_DIR})")
  else()
    message(STATUS "Kokkos config at ${Kokkos_DIR} is broken (include dirs '${_mlip_kk_inc}' "
                   "lack Kokkos_Core.hpp); falling back to the Trilinos headers")
  endif()
endif()

if(NOT TARGET mlip_kokkos)
  find_path(MLIP_KOKKOS_INCLUDE_DIR Kokkos_Core.hpp PATHS /usr/include/trilinos
            PATH_SUFFIXES trilinos)
  find_library(MLIP_KOKKOS_CORE_LIB NAMES trilinos_kokkoscore kokkoscore)
  if(NOT MLIP_KOKKOS_INCLUDE_DIR OR NOT MLIP_KOKKOS_CORE_LIB)
    message(FATAL_ERROR
      "Kokkos not found: no working KokkosConfig.cmake and no Kokkos_Core.hpp/libkokkoscore. "
      "Install libtrilinos-kokkos-dev (tools/setup.sh does) or pass -DKokkos_ROOT=<prefix>.")
  endif()
  add_library(mlip_kokkos INTERFACE)
  target_include_directories(mlip_kokkos SYSTEM INTERFACE "${MLIP_KOKKOS_INCLUDE_DIR}")
  find_package(Threads REQUIRED)
  target_link_libraries(mlip_kokkos INTERFACE "${MLIP_KOKKOS_CORE_LIB}" Threads::Threads ${CMAKE_DL_LIBS})
  set(MLIP_KOKKOS_SOURCE "headers ${MLIP_KOKKOS_INCLUDE_DIR}, ${MLIP_KOKKOS_CORE_LIB}")
endif()
