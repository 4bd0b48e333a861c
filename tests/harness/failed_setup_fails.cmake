# ctest -P script: through run_gtest.sh, the tests of a suite whose SetUpTestSuite failed must count as failed (exit
# non-zero, and no output that ctest's Google Test skip rule "[  SKIPPED ]" matches); a test that skips itself, as skipped.
set(skipped "\\[  SKIPPED \\]")
execute_process(COMMAND bash ${WRAPPER} ${BINARY} --gtest_filter=FailedSetup.* RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "a suite whose SetUpTestSuite failed exited 0:\n${out}")
endif()
if(out MATCHES "${skipped}")
  message(FATAL_ERROR "ctest would count the tests of a failed SetUpTestSuite as skipped (they must fail):\n${out}")
endif()
execute_process(COMMAND bash ${WRAPPER} ${BINARY} --gtest_filter=DeliberateSkip.* RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "${skipped}")
  message(FATAL_ERROR "a test that skips itself must exit 0 and read as skipped:\n${out}")
endif()
