// A suite whose SetUpTestSuite fails, and a test that skips itself: what ctest must tell apart when it runs a Google
// Test binary through run_gtest.sh (failed_setup_fails.cmake).
#include <gtest/gtest.h>

namespace {

class FailedSetup : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { FAIL() << "the suite's setup failed (on purpose: the harness test checks it is a failure)"; }
};

TEST_F(FailedSetup, IsNotSkipped) { SUCCEED(); }

TEST(DeliberateSkip, IsSkipped) { GTEST_SKIP() << "on purpose"; }

}  // namespace
