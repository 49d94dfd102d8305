# FindXgradBlas.cmake — finds the CBLAS that libxgrad links (included by the top-level
# CMakeLists.txt). Tried in order, the first that works wins:
#   1. OpenBLAS's own CMake package       find_package(OpenBLAS CONFIG)
#   2. pkg-config                         pkg_check_modules(openblas)
#   3. CMake's FindBLAS                    BLA_VENDOR=OpenBLAS, then any vendor (or only the
#                                          BLA_VENDOR you set), plus cblas.h by find_path
# Sets:
#   XGRAD_BLAS_INCLUDE_DIRS  where cblas.h is
#   XGRAD_BLAS_LIBRARIES     what to link (full paths or linker flags)
#   XGRAD_BLAS_METHOD        which of the ways above found it (also printed as a status line)
#   XGRAD_BLAS_IS_OPENBLAS   TRUE unless a non-OpenBLAS BLAS came from generic FindBLAS
# and, when the BLAS is OpenBLAS, OpenBLAS_INCLUDE_DIRS / OpenBLAS_LIBRARIES (the variables
# OpenBLAS's CMake package sets), for targets that call openblas_* functions themselves
# (benchmarks, tests/reliability). libxgrad only needs CBLAS: it looks up openblas_*
# functions at run time (weak symbols).
# Fails with FATAL_ERROR when no way finds a BLAS with cblas.h and cblas_sgemm.
include_guard(GLOBAL)
include(CheckCXXSourceCompiles)
include(CMakePushCheckState)

set(XGRAD_BLAS_METHOD "")
set(XGRAD_BLAS_IS_OPENBLAS FALSE)

# 1. OpenBLAS's CMake package (Debian/Ubuntu libopenblas-dev, OpenBLAS built with CMake).
find_package(OpenBLAS CONFIG QUIET)
if(OpenBLAS_FOUND AND OpenBLAS_LIBRARIES)
  set(XGRAD_BLAS_INCLUDE_DIRS ${OpenBLAS_INCLUDE_DIRS})
  set(XGRAD_BLAS_LIBRARIES ${OpenBLAS_LIBRARIES})
  set(XGRAD_BLAS_METHOD "OpenBLAS CMake config (${OpenBLAS_DIR})")
  set(XGRAD_BLAS_IS_OPENBLAS TRUE)
endif()

# 2. pkg-config's openblas.pc.
if(NOT XGRAD_BLAS_METHOD)
  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(XGRAD_OPENBLAS_PC QUIET openblas)
    if(XGRAD_OPENBLAS_PC_FOUND AND XGRAD_OPENBLAS_PC_LINK_LIBRARIES)
      set(XGRAD_BLAS_INCLUDE_DIRS ${XGRAD_OPENBLAS_PC_INCLUDE_DIRS})
      set(XGRAD_BLAS_LIBRARIES ${XGRAD_OPENBLAS_PC_LINK_LIBRARIES})
      set(XGRAD_BLAS_METHOD "pkg-config openblas ${XGRAD_OPENBLAS_PC_VERSION}")
      set(XGRAD_BLAS_IS_OPENBLAS TRUE)
    endif()
  endif()
endif()

# 3. FindBLAS: OpenBLAS first, then whatever BLAS is there; cblas.h found separately.
if(NOT XGRAD_BLAS_METHOD)
  if(DEFINED BLA_VENDOR AND NOT BLA_VENDOR STREQUAL "")
    set(_xgrad_blas_vendors ${BLA_VENDOR})  # the user chose one: only that
  else()
    set(_xgrad_blas_vendors OpenBLAS All)
  endif()
  set(_xgrad_saved_vendor "${BLA_VENDOR}")
  foreach(_xgrad_vendor IN LISTS _xgrad_blas_vendors)
    set(BLA_VENDOR ${_xgrad_vendor})
    find_package(BLAS QUIET)
    if(NOT BLAS_FOUND)
      continue()
    endif()
    find_path(XGRAD_CBLAS_INCLUDE_DIR cblas.h
              PATH_SUFFIXES openblas openblas-pthread openblas-openmp openblas-serial)
    if(NOT XGRAD_CBLAS_INCLUDE_DIR)
      message(STATUS "xgrad: FindBLAS (BLA_VENDOR=${_xgrad_vendor}) found ${BLAS_LIBRARIES} but no cblas.h")
      break()
    endif()
    # Some BLAS builds keep the C interface in a separate libcblas.
    string(CONCAT _xgrad_cblas_src "#include <cblas.h>\nint main() { float a = 1, b = 1, c = 0;\n"
           "  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);\n"
           "  return int(c) - 1; }\n")
    cmake_push_check_state(RESET)
    set(CMAKE_REQUIRED_QUIET ON)
    set(CMAKE_REQUIRED_INCLUDES ${XGRAD_CBLAS_INCLUDE_DIR})
    set(CMAKE_REQUIRED_LIBRARIES ${BLAS_LIBRARIES})
    unset(XGRAD_CBLAS_LINKS CACHE)
    check_cxx_source_compiles("${_xgrad_cblas_src}" XGRAD_CBLAS_LINKS)
    set(_xgrad_libs ${BLAS_LIBRARIES})
    if(NOT XGRAD_CBLAS_LINKS)
      find_library(XGRAD_CBLAS_LIBRARY cblas)
      if(XGRAD_CBLAS_LIBRARY)
        set(CMAKE_REQUIRED_LIBRARIES ${XGRAD_CBLAS_LIBRARY} ${BLAS_LIBRARIES})
        unset(XGRAD_CBLAS_LINKS CACHE)
        check_cxx_source_compiles("${_xgrad_cblas_src}" XGRAD_CBLAS_LINKS)
        set(_xgrad_libs ${XGRAD_CBLAS_LIBRARY} ${BLAS_LIBRARIES})
      endif()
    endif()
    if(XGRAD_CBLAS_LINKS)
      unset(XGRAD_BLAS_HAS_OPENBLAS_API CACHE)
      check_cxx_source_compiles("extern \"C\" char* openblas_get_config(void);\nint main() { return openblas_get_config() ? 0 : 1; }\n"
                                XGRAD_BLAS_HAS_OPENBLAS_API)
    endif()
    cmake_pop_check_state()
    if(XGRAD_CBLAS_LINKS)
      set(XGRAD_BLAS_INCLUDE_DIRS ${XGRAD_CBLAS_INCLUDE_DIR})
      set(XGRAD_BLAS_LIBRARIES ${_xgrad_libs})
      set(XGRAD_BLAS_METHOD "FindBLAS (BLA_VENDOR=${_xgrad_vendor})")
      if(XGRAD_BLAS_HAS_OPENBLAS_API)
        set(XGRAD_BLAS_IS_OPENBLAS TRUE)
      endif()
      break()
    endif()
    message(STATUS "xgrad: FindBLAS (BLA_VENDOR=${_xgrad_vendor}) found ${BLAS_LIBRARIES}, but cblas_sgemm does not link")
  endforeach()
  set(BLA_VENDOR "${_xgrad_saved_vendor}")
  unset(_xgrad_saved_vendor)
  unset(_xgrad_blas_vendors)
  unset(_xgrad_vendor)
  unset(_xgrad_libs)
  unset(_xgrad_cblas_src)
endif()

if(NOT XGRAD_BLAS_METHOD)
  message(FATAL_ERROR
    "xgrad: no BLAS with the C interface (cblas.h, cblas_sgemm) found: tried OpenBLAS's CMake "
    "package, pkg-config openblas and FindBLAS. Install OpenBLAS (Debian: libopenblas-dev), "
    "or point CMAKE_PREFIX_PATH / PKG_CONFIG_PATH at it, or set BLA_VENDOR.")
endif()

if(XGRAD_BLAS_IS_OPENBLAS)
  set(OpenBLAS_INCLUDE_DIRS ${XGRAD_BLAS_INCLUDE_DIRS})
  set(OpenBLAS_LIBRARIES ${XGRAD_BLAS_LIBRARIES})
  set(_xgrad_blas_kind "OpenBLAS")
else()
  set(_xgrad_blas_kind "not OpenBLAS: benchmarks and OpenBLAS-specific tests need OpenBLAS")
endif()
message(STATUS "xgrad: BLAS via ${XGRAD_BLAS_METHOD}: ${XGRAD_BLAS_LIBRARIES}; "
               "cblas.h in ${XGRAD_BLAS_INCLUDE_DIRS} (${_xgrad_blas_kind})")
unset(_xgrad_blas_kind)
