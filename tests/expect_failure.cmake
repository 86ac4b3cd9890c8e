# Runs a command that is supposed to fail, and passes only if it fails the expected way: a non-zero
# exit, output (stdout and stderr together) matching EXPECT, and no timeout. ctest's
# PASS_REGULAR_EXPRESSION cannot do this: it ignores the exit code, and a job that hangs until its
# kill timer fires may still have printed the expected line before hanging.
#
#   cmake "-DEXPECT=<regex>" [-DTIMEOUT=<seconds>] [-DONCE=ON] [-DEXIT_CODE=<n>] -P expect_failure.cmake
#         -- <command> [args...]
#
# ONCE: EXPECT must match exactly once (an error all ranks raise alike is printed by one of them).
# EXIT_CODE: the exit code the command must end with (2 for bad usage).
#
# The command goes after "--" so that its arguments need no list escaping; a ;-list in -DCOMMAND=
# is accepted too. TIMEOUT (default 60) should be shorter than any kill timer inside the command
# (MPIEXEC_TIMEOUT), so that a hang is reported as a hang.
cmake_minimum_required(VERSION 3.20)

if(NOT DEFINED EXPECT OR EXPECT STREQUAL "")
  message(FATAL_ERROR "expect_failure.cmake: -DEXPECT=<regex> is required")
endif()
if(NOT DEFINED TIMEOUT)
  set(TIMEOUT 60)
endif()

set(command "")
if(DEFINED COMMAND)
  set(command ${COMMAND})
else()
  set(after_separator FALSE)
  math(EXPR last "${CMAKE_ARGC} - 1")
  foreach(i RANGE 1 ${last})
    if(after_separator)
      string(REPLACE ";" "\\;" argument "${CMAKE_ARGV${i}}")  # keep an argument's ; inside it
      list(APPEND command "${argument}")
    elseif(CMAKE_ARGV${i} STREQUAL "--")
      set(after_separator TRUE)
    endif()
  endforeach()
endif()
if(command STREQUAL "")
  message(FATAL_ERROR "expect_failure.cmake: no command; pass it after -- (or as -DCOMMAND=<list>)")
endif()

list(JOIN command " " shown)
message(STATUS "running (must fail within ${TIMEOUT} s): ${shown}")
# The same variable for both streams merges them in the order they were produced.
execute_process(COMMAND ${command}
  TIMEOUT ${TIMEOUT}
  RESULT_VARIABLE result
  OUTPUT_VARIABLE output
  ERROR_VARIABLE output)
message("${output}")

if(result MATCHES "timeout")
  message(FATAL_ERROR "FAIL: the command did not finish within ${TIMEOUT} s (${result}); it must fail, not hang")
endif()
if(result STREQUAL "0")
  message(FATAL_ERROR "FAIL: the command exited with 0; it was expected to fail")
endif()
if(NOT output MATCHES "${EXPECT}")
  message(FATAL_ERROR "FAIL: the command failed (${result}) but its output does not match: ${EXPECT}")
endif()
if(ONCE)
  # An error every rank raises alike must be printed by one rank, not once per rank.
  string(REGEX MATCHALL "${EXPECT}" reports "${output}")
  list(LENGTH reports count)
  if(NOT count EQUAL 1)
    message(FATAL_ERROR "FAIL: the expected message was printed ${count} times; expected once")
  endif()
endif()
if(DEFINED EXIT_CODE AND NOT result STREQUAL EXIT_CODE)
  message(FATAL_ERROR "FAIL: exit code ${result}, expected ${EXIT_CODE}")
endif()
message(STATUS "PASS: failed as expected (${result}) with output matching: ${EXPECT}")
