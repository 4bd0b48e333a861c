// The permutation p-value (Phipson & Smyth 2010) on hand-counted nulls, and its calibration on exchangeable data.
#include "neuromkl/metrics/permutation.hpp"

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace metrics = neuromkl::metrics;

TEST(PermutationPValue, CountsPermutationsAtLeastAsGoodPlusOneOverPPlusOne) {
  const std::vector<double> null = {0.9, 0.7, 0.8, 0.5};
  const std::vector<char> none(4, 0);
  // Higher is better: 0.9 and 0.8 (a tie counts) are at least as good as 0.8 -> (2 + 1) / (4 + 1).
  EXPECT_DOUBLE_EQ(metrics::PermutationPValue(0.8, null, none, true), 3.0 / 5.0);
  // Lower is better (an error): 0.7, 0.5 and the tie 0.8 -> (3 + 1) / 5.
  EXPECT_DOUBLE_EQ(metrics::PermutationPValue(0.8, null, none, false), 4.0 / 5.0);
  // Better than every permutation: the smallest p a test of 4 permutations can give, 1 / 5, never 0.
  EXPECT_DOUBLE_EQ(metrics::PermutationPValue(1.0, null, none, true), 1.0 / 5.0);
}

TEST(PermutationPValue, AFailedPermutationCountsAsAtLeastAsGoodAndANanMetricDoesNot) {
  const std::vector<double> null = {0.9, std::nan(""), std::nan(""), 0.5};
  // Permutation 2 failed (no comparable metric): counted, so p is not made too small; permutation 3 only has a NaN.
  EXPECT_DOUBLE_EQ(metrics::PermutationPValue(0.8, null, {0, 1, 0, 0}, true), 3.0 / 5.0);
  EXPECT_TRUE(std::isnan(metrics::PermutationPValue(std::nan(""), null, {0, 1, 0, 0}, true)));
  EXPECT_THROW(metrics::PermutationPValue(0.8, null, {0, 1}, true), std::invalid_argument);
}

// Under the null (observed and permuted values exchangeable), P(p <= alpha) <= alpha, and = alpha when
// alpha (P + 1) is an integer: with P = 19, p <= 0.05 in 5 % of the experiments.
TEST(PermutationPValue, NullDataGiveTheNominalRate) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal;
  const int experiments = 20000, P = 19;
  int rejected = 0;
  const std::vector<char> none(P, 0);
  for (int e = 0; e < experiments; ++e) {
    std::vector<double> null(P);
    for (auto& v : null) v = normal(rng);
    rejected += metrics::PermutationPValue(normal(rng), null, none, true) <= 0.05;
  }
  // Binomial(20000, 0.05): SD 0.0015; 4 SD either side.
  EXPECT_NEAR(static_cast<double>(rejected) / experiments, 0.05, 0.006);
}
