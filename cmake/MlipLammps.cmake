# Finds the LAMMPS library for pair_style mlip (src/md) and provides the target LAMMPS::lammps.
# Sets MLIP_LAMMPS_FOUND, MLIP_LAMMPS_SOURCE (what was used, for the summary) and
# MLIP_LAMMPS_NEEDS_FMT_SHIM (the headers include a fmt/format.h they do not ship).
#
# 1. A LAMMPSConfig.cmake (in LAMMPS_DIR, under LAMMPS_ROOT, or in the default prefixes: a user
#    build or the system's) is used when every file it names exists.
# 2. Debian's liblammps-dev ships a config that also names the executable /usr/bin/lmp (package
#    lammps, not a dependency), and CMake fails hard on a missing file: then the library and
#    headers are taken directly (liblammps.so, <lammps/lammps.h>), with the compile definitions
#    the config records (LAMMPS_SMALLBIG by default: the integer sizes are part of LAMMPS' ABI).
# `required`: TRUE for MLIP_LAMMPS=ON (a FATAL_ERROR when nothing is found).
function(mlip_find_lammps required)
  set(MLIP_LAMMPS_FOUND FALSE PARENT_SCOPE)
  set(_source "")
  set(_config "")
  if(LAMMPS_DIR AND EXISTS "${LAMMPS_DIR}/LAMMPSConfig.cmake")
    set(_config "${LAMMPS_DIR}/LAMMPSConfig.cmake")
  else()
    set(_roots "")
    if(DEFINED LAMMPS_ROOT)
      list(APPEND _roots "${LAMMPS_ROOT}")
    endif()
    if(DEFINED ENV{LAMMPS_ROOT})
      list(APPEND _roots "$ENV{LAMMPS_ROOT}")
    endif()
    find_file(MLIP_LAMMPS_CONFIG LAMMPSConfig.cmake HINTS ${_roots}
              PATH_SUFFIXES lib/cmake/LAMMPS lib64/cmake/LAMMPS lib/x86_64-linux-gnu/cmake/LAMMPS
              lib/aarch64-linux-gnu/cmake/LAMMPS)
    if(MLIP_LAMMPS_CONFIG)
      set(_config "${MLIP_LAMMPS_CONFIG}")
    endif()
  endif()
  set(_complete FALSE)
  if(_config)
    get_filename_component(_dir "${_config}" DIRECTORY)
    set(_complete TRUE)
    # The config's own import prefix: its folder with one level stripped per
    # `get_filename_component(_IMPORT_PREFIX "${_IMPORT_PREFIX}" PATH)` line.
    set(_prefix "${_dir}")
    if(EXISTS "${_dir}/LAMMPS_Targets.cmake")
      file(STRINGS "${_dir}/LAMMPS_Targets.cmake" _strips
           REGEX "get_filename_component\\(_IMPORT_PREFIX \"\\\${_IMPORT_PREFIX}\" PATH\\)")
      foreach(_s IN LISTS _strips)
        get_filename_component(_prefix "${_prefix}" DIRECTORY)
      endforeach()
    endif()
    file(GLOB _target_files "${_dir}/LAMMPS_Targets-*.cmake")
    foreach(_f IN LISTS _target_files)
      file(STRINGS "${_f}" _locations REGEX "IMPORTED_LOCATION")
      foreach(_line IN LISTS _locations)
        string(REGEX MATCH "\\\${_IMPORT_PREFIX}[^\" ]*" _rel "${_line}")
        string(REPLACE "\${_IMPORT_PREFIX}" "" _rel "${_rel}")
        if(_rel AND NOT EXISTS "${_prefix}${_rel}")
          set(_complete FALSE)
          set(_missing "${_prefix}${_rel}")
        endif()
      endforeach()
    endforeach()
  endif()
  if(_complete)
    set(LAMMPS_DIR "${_dir}")
    find_package(LAMMPS CONFIG QUIET NO_DEFAULT_PATH PATHS "${_dir}")
    if(LAMMPS_FOUND)
      set(_source "config (${_dir})")
    endif()
  else()
    find_library(MLIP_LAMMPS_LIBRARY NAMES lammps HINTS ${_roots} PATH_SUFFIXES lib lib64)
    find_path(MLIP_LAMMPS_INCLUDE_DIR lammps.h HINTS ${_roots} PATH_SUFFIXES include/lammps lammps)
    if(MLIP_LAMMPS_LIBRARY AND MLIP_LAMMPS_INCLUDE_DIR AND NOT TARGET LAMMPS::lammps)
      set(_defs "LAMMPS_SMALLBIG")
      if(_config AND EXISTS "${_dir}/LAMMPS_Targets.cmake")
        file(STRINGS "${_dir}/LAMMPS_Targets.cmake" _def_line REGEX "INTERFACE_COMPILE_DEFINITIONS")
        string(REGEX MATCH "\"[^\"]*\"" _quoted "${_def_line}")
        string(REPLACE "\"" "" _quoted "${_quoted}")
        if(_quoted)
          set(_defs "${_quoted}")
        endif()
      endif()
      add_library(LAMMPS::lammps SHARED IMPORTED GLOBAL)
      set_target_properties(LAMMPS::lammps PROPERTIES
        IMPORTED_LOCATION "${MLIP_LAMMPS_LIBRARY}"
        INTERFACE_INCLUDE_DIRECTORIES "${MLIP_LAMMPS_INCLUDE_DIR}"
        INTERFACE_COMPILE_DEFINITIONS "${_defs}")
      set(_source "library ${MLIP_LAMMPS_LIBRARY}, headers ${MLIP_LAMMPS_INCLUDE_DIR} (${_defs})")
      if(_config)
        message(STATUS "LAMMPS config ${_config} names ${_missing}, which is not installed; "
                       "using the library and headers directly")
      endif()
    endif()
  endif()
  if(NOT TARGET LAMMPS::lammps)
    if(required)
      message(FATAL_ERROR "MLIP_LAMMPS=ON but no LAMMPS library was found: install Debian's liblammps-dev "
                          "(tools/setup.sh does) or pass -DLAMMPS_DIR=<folder of LAMMPSConfig.cmake>")
    endif()
    return()
  endif()
  get_target_property(_inc LAMMPS::lammps INTERFACE_INCLUDE_DIRECTORIES)
  set(_shim TRUE)
  foreach(_d IN LISTS _inc)
    if(EXISTS "${_d}/fmt/format.h")
      set(_shim FALSE)
    endif()
  endforeach()
  set(MLIP_LAMMPS_FOUND TRUE PARENT_SCOPE)
  set(MLIP_LAMMPS_SOURCE "${_source}" PARENT_SCOPE)
  set(MLIP_LAMMPS_NEEDS_FMT_SHIM ${_shim} PARENT_SCOPE)
endfunction()
