# Finds what hpcps::hpcps needs. Included by our CMakeLists.txt and by the installed
# hpcpsConfig.cmake, so a build tree and an installed package resolve dependencies the same way.
#
# Inside find_package(hpcps) we use find_dependency(): it forwards QUIET/REQUIRED and, when a
# dependency is missing, sets hpcps_FOUND to FALSE with a message and return()s from this file
# (hpcpsConfig.cmake checks for that). In our own build there is no find_package(hpcps) to report
# to, so a missing dependency must stop the configure right here, with the dependency named.
include(CMakeFindDependencyMacro)
if(CMAKE_FIND_PACKAGE_NAME STREQUAL "hpcps")
  macro(_hpcps_find_dependency)
    find_dependency(${ARGN})
  endmacro()
else()
  macro(_hpcps_find_dependency)
    find_package(${ARGN} REQUIRED)
  endmacro()
endif()

_hpcps_find_dependency(MPI COMPONENTS CXX)
_hpcps_find_dependency(fmt)
_hpcps_find_dependency(Eigen3 3.3 NO_MODULE)
_hpcps_find_dependency(ZLIB)
_hpcps_find_dependency(OpenMP COMPONENTS CXX)

# OpenBLAS ships a config that sets variables only; wrap it in an imported target once.
if(NOT TARGET hpcps::openblas)
  find_package(OpenBLAS CONFIG QUIET)
  # Debian's OpenBLASConfig.cmake names absolute /usr paths: use it only where they hold the files
  # (not in a relocated copy of the package, where pkg-config with a sysroot does the job).
  if(OpenBLAS_FOUND AND EXISTS "${OpenBLAS_INCLUDE_DIRS}/cblas.h" AND EXISTS "${OpenBLAS_LIBRARIES}")
    add_library(hpcps::openblas INTERFACE IMPORTED)
    set_target_properties(hpcps::openblas PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${OpenBLAS_INCLUDE_DIRS}"
      INTERFACE_LINK_LIBRARIES "${OpenBLAS_LIBRARIES}")
  else()
    find_package(PkgConfig QUIET)
    if(PkgConfig_FOUND)
      pkg_check_modules(HPCPS_OPENBLAS QUIET IMPORTED_TARGET openblas)
    endif()
    if(NOT HPCPS_OPENBLAS_FOUND)
      set(_hpcps_openblas_msg
        "hpcps needs OpenBLAS (CBLAS). On Debian: apt-get install libopenblas-dev")
      if(CMAKE_FIND_PACKAGE_NAME STREQUAL "hpcps")
        set(hpcps_NOT_FOUND_MESSAGE "${_hpcps_openblas_msg}")
        set(hpcps_FOUND FALSE)
        return()
      endif()
      message(FATAL_ERROR "${_hpcps_openblas_msg}")
    endif()
    add_library(hpcps::openblas INTERFACE IMPORTED)
    set_target_properties(hpcps::openblas PROPERTIES INTERFACE_LINK_LIBRARIES PkgConfig::HPCPS_OPENBLAS)
  endif()
endif()

# oneDNN: backend::Cpu's convolutions (docs/backends.md, "Convolution: which method"). Found by
# its header and library, not by Debian's dnnl-config.cmake: that one demands OpenCL's development
# files (its GPU runtime), which a CPU build never uses.
if(NOT TARGET hpcps::dnnl)
  find_path(HPCPS_DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp DOC "Folder with oneDNN's headers")
  find_library(HPCPS_DNNL_LIBRARY NAMES dnnl DOC "oneDNN's library (libdnnl)")
  if(NOT HPCPS_DNNL_INCLUDE_DIR OR NOT HPCPS_DNNL_LIBRARY)
    set(_hpcps_dnnl_msg "hpcps needs oneDNN (oneapi/dnnl/dnnl.hpp, libdnnl). On Debian: apt-get install libdnnl-dev")
    if(CMAKE_FIND_PACKAGE_NAME STREQUAL "hpcps")
      set(hpcps_NOT_FOUND_MESSAGE "${_hpcps_dnnl_msg}")
      set(hpcps_FOUND FALSE)
      return()
    endif()
    message(FATAL_ERROR "${_hpcps_dnnl_msg}")
  endif()
  add_library(hpcps::dnnl INTERFACE IMPORTED)
  set_target_properties(hpcps::dnnl PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${HPCPS_DNNL_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${HPCPS_DNNL_LIBRARY}")
endif()

# Optional: Thrust and CUB headers (CCCL) for backend::Thrust, from the CUDA toolkit. The host
# systems (OpenMP, CPP) need only the headers and OpenMP; hpcps::thrust exists when they are found.
if(NOT TARGET hpcps::thrust)
  find_path(HPCPS_CCCL_INCLUDE_DIR thrust/version.h
    HINTS ${CUDAToolkit_ROOT} $ENV{CUDA_HOME} $ENV{CUDA_PATH} /usr/local/cuda
    PATH_SUFFIXES include/cccl
    DOC "Folder with Thrust's headers (CCCL), for backend::Thrust")
  if(HPCPS_CCCL_INCLUDE_DIR)
    add_library(hpcps::thrust INTERFACE IMPORTED)
    # SYSTEM: Thrust's own headers are not ours to warn about.
    set_target_properties(hpcps::thrust PROPERTIES
      INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${HPCPS_CCCL_INCLUDE_DIR}"
      INTERFACE_INCLUDE_DIRECTORIES "${HPCPS_CCCL_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES "OpenMP::OpenMP_CXX"
      # nvcc passes -fopenmp to the host compiler only when told (the OpenMP system's headers).
      # --expt-relaxed-constexpr: Eigen (pulled in by backend::Cpu) calls constexpr host functions
      # from its __host__ __device__ code.
      INTERFACE_COMPILE_OPTIONS "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-fopenmp;--expt-relaxed-constexpr>")
  endif()
endif()
