# Install/consumer test: installs the xgrad build tree into a private prefix, then
# configures, builds and runs tests/consumer/project against it with
# find_package(xgrad CONFIG REQUIRED). Any failing step is a FATAL_ERROR.
#
# Usage: cmake -DSOURCE_DIR=<xgrad source> -DBUILD_DIR=<built xgrad tree>
#              -DWORK_DIR=<scratch dir> -P run_consumer_test.cmake
cmake_minimum_required(VERSION 3.22)

foreach(var SOURCE_DIR BUILD_DIR WORK_DIR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_consumer_test: -D${var}=... is required")
  endif()
endforeach()
if(NOT EXISTS "${BUILD_DIR}/CMakeCache.txt")
  message(FATAL_ERROR "run_consumer_test: ${BUILD_DIR} is not a configured build tree")
endif()

set(prefix "${WORK_DIR}/prefix")
set(consumer_src "${SOURCE_DIR}/tests/consumer/project")
set(consumer_build "${WORK_DIR}/build")
set(expected_line "consumer ok")

# Start from scratch so stale files from an earlier install cannot hide a broken one.
file(REMOVE_RECURSE "${prefix}" "${consumer_build}")
file(MAKE_DIRECTORY "${WORK_DIR}")

# Reuse the generator, make program, compiler and build type of the xgrad build tree.
load_cache("${BUILD_DIR}" READ_WITH_PREFIX XG_
  CMAKE_GENERATOR CMAKE_MAKE_PROGRAM CMAKE_CXX_COMPILER CMAKE_BUILD_TYPE)
set(configure_args -S "${consumer_src}" -B "${consumer_build}"
  "-DCMAKE_PREFIX_PATH=${prefix}")
if(XG_CMAKE_GENERATOR)
  list(APPEND configure_args -G "${XG_CMAKE_GENERATOR}")
  if(XG_CMAKE_MAKE_PROGRAM)
    list(APPEND configure_args "-DCMAKE_MAKE_PROGRAM=${XG_CMAKE_MAKE_PROGRAM}")
  endif()
endif()
if(XG_CMAKE_CXX_COMPILER)
  list(APPEND configure_args "-DCMAKE_CXX_COMPILER=${XG_CMAKE_CXX_COMPILER}")
endif()
if(XG_CMAKE_BUILD_TYPE)
  set(build_type "${XG_CMAKE_BUILD_TYPE}")
else()
  set(build_type Release)
endif()
list(APPEND configure_args "-DCMAKE_BUILD_TYPE=${build_type}")

# Runs one step; on failure prints its output and stops the test.
function(run_step name)
  message(STATUS "consumer test: ${name}: ${ARGN}")
  execute_process(COMMAND ${ARGN}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer test: step '${name}' failed (exit ${rc})\n"
                        "--- stdout ---\n${out}\n--- stderr ---\n${err}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

run_step(install "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}"
  --config "${build_type}")

# The installed tree must hold the package files and the public umbrella header.
file(GLOB_RECURSE config_files "${prefix}/*/xgradConfig.cmake")
if(NOT config_files)
  message(FATAL_ERROR "consumer test: no xgradConfig.cmake installed under ${prefix}")
endif()
if(NOT EXISTS "${prefix}/include/xgrad/xgrad.hpp")
  message(FATAL_ERROR "consumer test: ${prefix}/include/xgrad/xgrad.hpp not installed")
endif()

run_step(configure "${CMAKE_COMMAND}" ${configure_args})
run_step(build "${CMAKE_COMMAND}" --build "${consumer_build}" --config "${build_type}")

# Single-config generators put the program at the top of the build tree; multi-config
# ones under <config>/.
set(app "${consumer_build}/app")
if(NOT EXISTS "${app}")
  set(app "${consumer_build}/${build_type}/app")
endif()
if(NOT EXISTS "${app}")
  message(FATAL_ERROR "consumer test: built program not found in ${consumer_build}")
endif()
# No LD_LIBRARY_PATH: the program must find the installed libxgrad.so through its RPATH.
run_step(run "${app}")
message(STATUS "consumer test: program output:\n${step_output}")

string(FIND "${step_output}" "${expected_line}" pos)
if(pos EQUAL -1)
  message(FATAL_ERROR "consumer test: expected the line '${expected_line}' in the output:\n"
                      "${step_output}")
endif()
# xgrad::distributed: built by the consumer when the package has it (the xgrad build found MPI);
# run as one rank without mpirun, then under mpirun with 2 ranks when mpirun exists.
load_cache("${BUILD_DIR}" READ_WITH_PREFIX XG_ XGRAD_HAVE_DISTRIBUTED XGRAD_MPIRUN)
if(XG_XGRAD_HAVE_DISTRIBUTED)
  set(dist_app "${consumer_build}/app_dist")
  if(NOT EXISTS "${dist_app}")
    set(dist_app "${consumer_build}/${build_type}/app_dist")
  endif()
  if(NOT EXISTS "${dist_app}")
    message(FATAL_ERROR "consumer test: xgrad was built with xgrad::distributed but app_dist was not built "
                        "(the installed package does not export xgrad::distributed)")
  endif()
  run_step(run_dist "${dist_app}")
  string(FIND "${step_output}" "consumer distributed ok (1 ranks)" pos)
  if(pos EQUAL -1)
    message(FATAL_ERROR "consumer test: app_dist printed:\n${step_output}")
  endif()
  if(XG_XGRAD_MPIRUN)
    set(ENV{OMPI_ALLOW_RUN_AS_ROOT} 1)
    set(ENV{OMPI_ALLOW_RUN_AS_ROOT_CONFIRM} 1)
    run_step(run_dist_mpi "${XG_XGRAD_MPIRUN}" -np 2 --oversubscribe "${dist_app}")
    string(FIND "${step_output}" "consumer distributed ok (2 ranks)" pos)
    if(pos EQUAL -1)
      message(FATAL_ERROR "consumer test: mpirun -np 2 app_dist printed:\n${step_output}")
    endif()
  endif()
  message(STATUS "consumer test: xgrad::distributed ok")
endif()
message(STATUS "consumer test: passed")
