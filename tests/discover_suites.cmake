# Included by ctest (TEST_INCLUDE_FILES): one ctest entry per top-level Boost.Test suite of
# xgrad_tests, found by asking the built executable (`--list_content`), so a new
# tests/test_<area>.cpp with its own BOOST_AUTO_TEST_SUITE runs without editing any CMake file.
# Top-level suites are the lines of --list_content that are not indented ("engine*").
execute_process(COMMAND "${XGRAD_TESTS_EXE}" --list_content
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
string(REPLACE "\n" ";" lines "${out}${err}")
set(found 0)
foreach(line IN LISTS lines)
  if(rc EQUAL 0 AND line MATCHES "^([A-Za-z_][A-Za-z0-9_]*)\\*?$")
    add_test(${CMAKE_MATCH_1} "${XGRAD_TESTS_EXE}" --run_test=${CMAKE_MATCH_1} --log_level=test_suite)
    math(EXPR found "${found} + 1")
  endif()
endforeach()
if(found EQUAL 0)
  # Not built, or it cannot list its suites: one failing entry says so instead of none.
  string(REPLACE "\"" "'" why "${err}")
  add_test(xgrad_tests_discovery sh -c "echo 'xgrad_tests --list_content failed (exit ${rc}): ${why}' >&2; exit 1")
endif()
