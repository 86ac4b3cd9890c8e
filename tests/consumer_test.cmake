# Run by the consumer_package ctest as `cmake -D... -P consumer_test.cmake`:
#  1. installs the hpcps build tree HPCPS_BINARY_DIR into <HPCPS_BINARY_DIR>/consumer-prefix,
#  2. configures, builds and runs tests/consumer against that prefix with find_package(hpcps 0.1),
#     checking that the hpcps it found is the installed one (not the source or build tree),
#  3. configures, builds and runs tests/consumer once more with add_subdirectory(HPCPS_SOURCE_DIR).
# Each step runs with execute_process; a failing step stops the test and prints its output.
#
# Inputs (-D): HPCPS_SOURCE_DIR, HPCPS_BINARY_DIR (required); HPCPS_CONFIG, HPCPS_GENERATOR,
# HPCPS_MAKE_PROGRAM, HPCPS_CXX_COMPILER (optional: the hpcps build's, so the consumer matches it),
# HPCPS_MPIEXEC (optional: runs the tutorial's train_cnn on 2 ranks).
cmake_minimum_required(VERSION 3.20)

foreach(var HPCPS_SOURCE_DIR HPCPS_BINARY_DIR)
  if(NOT ${var})
    message(FATAL_ERROR "consumer_test.cmake: pass -D${var}=...")
  endif()
endforeach()

set(consumer_src "${HPCPS_SOURCE_DIR}/tests/consumer")
set(prefix "${HPCPS_BINARY_DIR}/consumer-prefix")
set(work "${HPCPS_BINARY_DIR}/consumer-build")

# run_step(<name> <command...>): runs the command, fails with its output if it exits non-zero.
# Leaves the combined stdout+stderr in step_output.
function(run_step name)
  list(JOIN ARGN " " shown)
  message(STATUS "consumer_package: ${name}\n   ${shown}")
  execute_process(COMMAND ${ARGN}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc STREQUAL "0")
    message(FATAL_ERROR "consumer_package: step '${name}' failed (exit ${rc}):\n   ${shown}\n${out}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

# The consumer is configured like the hpcps build: same generator, make program, compiler, config.
set(configure_args)
if(HPCPS_GENERATOR)
  list(APPEND configure_args -G "${HPCPS_GENERATOR}")
endif()
if(HPCPS_MAKE_PROGRAM)
  list(APPEND configure_args "-DCMAKE_MAKE_PROGRAM=${HPCPS_MAKE_PROGRAM}")
endif()
if(HPCPS_CXX_COMPILER)
  list(APPEND configure_args "-DCMAKE_CXX_COMPILER=${HPCPS_CXX_COMPILER}")
endif()
set(config_args)
if(HPCPS_CONFIG)
  list(APPEND configure_args "-DCMAKE_BUILD_TYPE=${HPCPS_CONFIG}")
  set(config_args --config "${HPCPS_CONFIG}")
endif()

# build_and_run(<label> <binary dir> <extra configure args...>)
function(build_and_run label bindir)
  run_step("configure consumer (${label})"
    "${CMAKE_COMMAND}" -S "${consumer_src}" -B "${bindir}" ${configure_args} ${ARGN})
  run_step("build consumer (${label})" "${CMAKE_COMMAND}" --build "${bindir}" ${config_args})
  set(exe "${bindir}/hpcps_consumer")
  if(NOT EXISTS "${exe}" AND HPCPS_CONFIG)
    set(exe "${bindir}/${HPCPS_CONFIG}/hpcps_consumer")   # multi-config generators
  endif()
  run_step("run consumer (${label})" "${exe}")
  message(STATUS "${step_output}")
  if(NOT step_output MATCHES "hpcps consumer OK")
    message(FATAL_ERROR "consumer_package: consumer (${label}) did not print 'hpcps consumer OK'")
  endif()
endfunction()

# Start clean, so headers or config files that no longer exist cannot linger in the prefix.
file(REMOVE_RECURSE "${prefix}" "${work}")

run_step("install hpcps into ${prefix}"
  "${CMAKE_COMMAND}" --install "${HPCPS_BINARY_DIR}" --prefix "${prefix}" ${config_args})

build_and_run("find_package" "${work}/find_package"
  "-DCMAKE_PREFIX_PATH=${prefix}" -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON)

# The consumer must have used the installed package, not a build tree or a system-wide install.
file(STRINGS "${work}/find_package/CMakeCache.txt" hpcps_dir_line REGEX "^hpcps_DIR:")
string(REGEX REPLACE "^hpcps_DIR:[A-Z]+=" "" hpcps_dir "${hpcps_dir_line}")
file(REAL_PATH "${prefix}" real_prefix)
if(hpcps_dir)
  file(REAL_PATH "${hpcps_dir}" hpcps_dir)
endif()
string(FIND "${hpcps_dir}/" "${real_prefix}/" at)
if(NOT at EQUAL 0)
  message(FATAL_ERROR
    "consumer_package: find_package(hpcps) used '${hpcps_dir}', not the install in ${prefix}")
endif()

# The tutorial's program, as a user runs it: 2 colocated ranks, one epoch on 2,000 samples.
if(HPCPS_MPIEXEC AND EXISTS /usr/share/datasets/fashion-mnist)
  run_step("run the tutorial's train_cnn" "${HPCPS_MPIEXEC}" -iface lo -n 2 "${work}/find_package/train_cnn" 1 2000)
  message(STATUS "${step_output}")
  if(NOT step_output MATCHES "final test accuracy 0\\.[3-9]")
    message(FATAL_ERROR "consumer_package: the tutorial's train_cnn did not learn (accuracy below 0.3)")
  endif()
endif()

build_and_run("add_subdirectory" "${work}/add_subdirectory" "-DHPCPS_SOURCE_DIR=${HPCPS_SOURCE_DIR}"
  -DHPCPS_CONSUMER_TUTORIAL=OFF)

# Configured without CMAKE_BUILD_TYPE, the consumer project must choose Release by itself, and
# hpcps's package must warn a project that does not.
list(FILTER configure_args EXCLUDE REGEX "^-DCMAKE_BUILD_TYPE=")
run_step("configure consumer without a build type" "${CMAKE_COMMAND}" -S "${consumer_src}" -B "${work}/no_build_type"
  ${configure_args} "-DCMAKE_PREFIX_PATH=${prefix}" -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON)
file(STRINGS "${work}/no_build_type/CMakeCache.txt" build_type_line REGEX "^CMAKE_BUILD_TYPE:")
if(NOT build_type_line MATCHES "=Release$")
  message(FATAL_ERROR "consumer_package: without CMAKE_BUILD_TYPE the consumer chose '${build_type_line}', not Release")
endif()
set(bare "${work}/bare")
file(MAKE_DIRECTORY "${bare}")
file(WRITE "${bare}/CMakeLists.txt" "cmake_minimum_required(VERSION 3.20)\nproject(bare LANGUAGES CXX)\nfind_package(hpcps 0.1 REQUIRED)\n")
run_step("configure a project without a build type" "${CMAKE_COMMAND}" -S "${bare}" -B "${bare}/build"
  ${configure_args} "-DCMAKE_PREFIX_PATH=${prefix}" -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON)
if(NOT step_output MATCHES "CMAKE_BUILD_TYPE is not set")
  message(FATAL_ERROR "consumer_package: find_package(hpcps) did not warn a project without a build type")
endif()

message(STATUS "consumer_package: installed package and add_subdirectory() both work")
