#include <gtest/gtest.h>

#include "neuromkl/core/hash.hpp"
#include "neuromkl/core/strings.hpp"

using namespace neuromkl;

TEST(Strings, EditDistanceHandComputed) {
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
  EXPECT_EQ(EditDistance("", "abc"), 3u);
  EXPECT_EQ(EditDistance("lambda", "lambda"), 0u);
}

TEST(Strings, DidYouMeanSuggestsOnlyPlausibleTypos) {
  EXPECT_EQ(DidYouMean("lamda", {"lambda", "mu"}), "; did you mean \"lambda\"?");
  EXPECT_EQ(DidYouMean("learner", {"learners", "name"}), "; did you mean \"learners\"?");
  EXPECT_EQ(DidYouMean("completely_different", {"mu", "c"}), "");
}

TEST(Strings, FormatDoubleRoundTrips) {
  for (double v : {0.1, 1.0 / 3.0, 1e-300, 123456789.125, -2.5})
    EXPECT_EQ(std::stod(FormatDouble(v)), v);
  EXPECT_EQ(FormatDouble(0.5), "0.5");
}

TEST(Hash, ContentSensitiveAndStable) {
  Hasher a, b, c;
  a.Update(std::string_view("abc"));
  b.Update(std::string_view("abc"));
  c.Update(std::string_view("abd"));
  EXPECT_EQ(a.Digest(), b.Digest());
  EXPECT_NE(a.Digest(), c.Digest());
  EXPECT_EQ(a.Hex().size(), 32u);  // 128 bits
}
