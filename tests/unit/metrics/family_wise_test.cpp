// Family-wise permutation p-values by the maximum statistic (Westfall & Young 1993) and Benjamini-Hochberg q-values,
// on hand-counted cases, against the definitions, and their calibration on exchangeable data.
#include "neuromkl/metrics/family_wise.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace metrics = neuromkl::metrics;

TEST(MaxStatisticPValues, CountsByHand) {
  const std::vector<double> observed = {5, 2, 1};
  // Four permutations; their maxima are 1, 3, 6, 2.
  const std::vector<std::vector<double>> null = {{1, 1, 1}, {3, 0, 0}, {0, 6, 0}, {2, 2, 2}};
  const auto p = metrics::MaxStatisticPValues(observed, null, std::vector<char>(4, 0));
  // Member 0: no permutation of its own reaches 5 -> 1/5; one maximum (6) does -> 2/5.
  // Member 1: its own 6 and 2 reach 2 -> 3/5; maxima 3, 6, 2 -> 4/5. Member 2: 1 and 2 -> 3/5; every maximum -> 5/5.
  EXPECT_DOUBLE_EQ(p.uncorrected[0], 1.0 / 5);
  EXPECT_DOUBLE_EQ(p.uncorrected[1], 3.0 / 5);
  EXPECT_DOUBLE_EQ(p.uncorrected[2], 3.0 / 5);
  EXPECT_DOUBLE_EQ(p.familyWise[0], 2.0 / 5);
  EXPECT_DOUBLE_EQ(p.familyWise[1], 4.0 / 5);
  EXPECT_DOUBLE_EQ(p.familyWise[2], 1.0);
  // BH of {0.2, 0.6, 0.6}: 3 * 0.2 / 1 = 0.6 and 3 * 0.6 / 3 = 0.6.
  for (double q : p.q) EXPECT_DOUBLE_EQ(q, 0.6);
}

TEST(MaxStatisticPValues, AFailedPermutationCountsForEveryMemberAndNanObservedGivesNan) {
  const std::vector<double> observed = {5, std::nan("")};
  const std::vector<std::vector<double>> null = {{1, 1}, {std::nan(""), std::nan("")}, {0, 0}};
  const auto p = metrics::MaxStatisticPValues(observed, null, {0, 1, 0});
  EXPECT_DOUBLE_EQ(p.uncorrected[0], 2.0 / 4);  // the failed permutation only
  EXPECT_DOUBLE_EQ(p.familyWise[0], 2.0 / 4);
  EXPECT_TRUE(std::isnan(p.uncorrected[1]) && std::isnan(p.familyWise[1]) && std::isnan(p.q[1]));
  EXPECT_DOUBLE_EQ(p.q[0], 0.5);  // a family of one finite p-value
  EXPECT_THROW(metrics::MaxStatisticPValues(observed, null, {0, 1}), std::invalid_argument);
  EXPECT_THROW(metrics::MaxStatisticPValues(observed, {{1, 1, 1}}, {0}), std::invalid_argument);
}

TEST(BenjaminiHochberg, ByHand) {
  // Sorted: 0.01, 0.03, 0.04, 0.5 (m = 4): 4 * 0.5 / 4 = 0.5; 4 * 0.04 / 3 = 0.0533; min(0.0533, 4 * 0.03 / 2 = 0.06);
  // 4 * 0.01 / 1 = 0.04.
  const auto q = metrics::BenjaminiHochberg({0.01, 0.04, 0.03, 0.5, std::nan("")});
  EXPECT_DOUBLE_EQ(q[0], 0.04);
  EXPECT_DOUBLE_EQ(q[1], 4 * 0.04 / 3);
  EXPECT_DOUBLE_EQ(q[2], 4 * 0.04 / 3);
  EXPECT_DOUBLE_EQ(q[3], 0.5);
  EXPECT_TRUE(std::isnan(q[4]));
  EXPECT_DOUBLE_EQ(metrics::BenjaminiHochberg({0.9, 0.8})[0], 0.9);  // capped by the largest p, never above 1
}

TEST(Holm, ByHandAndAgainstTheDefinition) {
  // Sorted: 0.01 (x 4 = 0.04), 0.03 (x 3 = 0.09), 0.04 (x 2 = 0.08, raised to 0.09), 0.5 (x 1).
  const auto h = metrics::Holm({0.01, 0.04, 0.03, 0.5, std::nan("")});
  EXPECT_DOUBLE_EQ(h[0], 0.04);
  EXPECT_DOUBLE_EQ(h[1], 0.09);
  EXPECT_DOUBLE_EQ(h[2], 0.09);
  EXPECT_DOUBLE_EQ(h[3], 0.5);
  EXPECT_TRUE(std::isnan(h[4]));
  // The definition: adjusted p_(i) = max over k <= i of min(1, (m - k + 1) p_(k)), on random families with ties.
  std::mt19937_64 rng(9);
  std::uniform_int_distribution<int> grid(1, 30);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<double> p(1 + trial % 9);
    for (auto& v : p) v = grid(rng) / 60.0;
    std::vector<double> sorted = p;
    std::sort(sorted.begin(), sorted.end());
    const auto adjusted = metrics::Holm(p);
    const double m = static_cast<double>(p.size());
    for (std::size_t i = 0; i < p.size(); ++i) {
      double expected = 0;
      for (std::size_t k = 0; k < sorted.size() && sorted[k] <= p[i]; ++k) expected = std::max(expected, std::min(1.0, (m - static_cast<double>(k)) * sorted[k]));
      EXPECT_NEAR(adjusted[i], expected, 1e-15) << "trial " << trial;
    }
  }
}

// The definition, transcribed directly: q_i = min over the p_(k) >= p_i of m p_(k) / k (k = the rank of p_(k)), at most 1.
TEST(BenjaminiHochberg, EqualsTheDefinitionOnRandomFamiliesWithTies) {
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<int> grid(1, 40);  // ties are frequent
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<double> p(1 + trial % 17);
    for (auto& v : p) v = grid(rng) / 40.0;
    std::vector<double> sorted = p;
    std::sort(sorted.begin(), sorted.end());
    const auto q = metrics::BenjaminiHochberg(p);
    const double m = static_cast<double>(p.size());
    for (std::size_t i = 0; i < p.size(); ++i) {
      double expected = 1.0;
      for (std::size_t k = 0; k < sorted.size(); ++k)
        if (sorted[k] >= p[i]) expected = std::min(expected, m * sorted[k] / static_cast<double>(k + 1));
      EXPECT_NEAR(q[i], expected, 1e-15) << "trial " << trial << " member " << i;
    }
  }
}

// Global null: the observed family and the permuted ones are exchangeable. The family-wise error (any member with
// p_FWE <= 0.05) happens exactly when the observed maximum exceeds every permutation's maximum: probability
// 1 / (P + 1) = 0.05 with P = 19, whatever the members' scales (here 1 to 10, as regions of different sizes).
TEST(MaxStatisticPValues, NullFamiliesGiveTheNominalFamilyWiseErrorRate) {
  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal;
  const int experiments = 20000, P = 19, m = 10;
  int anyRejected = 0, uncorrectedRejected = 0;
  for (int e = 0; e < experiments; ++e) {
    auto draw = [&] {
      std::vector<double> v(m);
      for (int j = 0; j < m; ++j) v[static_cast<std::size_t>(j)] = (j + 1) * std::abs(normal(rng));
      return v;
    };
    const std::vector<double> observed = draw();
    std::vector<std::vector<double>> null(P);
    for (auto& b : null) b = draw();
    const auto p = metrics::MaxStatisticPValues(observed, null, std::vector<char>(P, 0));
    anyRejected += std::any_of(p.familyWise.begin(), p.familyWise.end(), [](double v) { return v <= 0.05; });
    uncorrectedRejected += std::count_if(p.uncorrected.begin(), p.uncorrected.end(), [](double v) { return v <= 0.05; });
  }
  // Binomial(20000, 0.05): SD 0.0015; 4 SD either side.
  EXPECT_NEAR(static_cast<double>(anyRejected) / experiments, 0.05, 0.006);
  // Each uncorrected test alone is at its nominal 5 % (m tests per experiment, so without correction the family errs far more often).
  EXPECT_NEAR(static_cast<double>(uncorrectedRejected) / (experiments * m), 0.05, 0.003);
}

// A member far beyond its null is found, the others are not: with the maximum statistic, the members at null
// keep p_FWE above 0.05 in at least 95 % of the experiments (strong control).
TEST(MaxStatisticPValues, APlantedMemberIsFoundAndTheNullMembersAreNot) {
  std::mt19937_64 rng(5);
  std::normal_distribution<double> normal;
  const int experiments = 2000, P = 99, m = 8;
  int found = 0, falselyFound = 0;
  for (int e = 0; e < experiments; ++e) {
    auto draw = [&](bool planted) {
      std::vector<double> v(m);
      for (auto& x : v) x = std::abs(normal(rng));
      if (planted) v[0] += 6;
      return v;
    };
    const auto observed = draw(true);
    std::vector<std::vector<double>> null(P);
    for (auto& b : null) b = draw(false);
    const auto p = metrics::MaxStatisticPValues(observed, null, std::vector<char>(P, 0));
    found += p.familyWise[0] <= 0.05;
    falselyFound += std::any_of(p.familyWise.begin() + 1, p.familyWise.end(), [](double v) { return v <= 0.05; });
  }
  EXPECT_EQ(found, experiments);  // 6 is beyond every null value of |N(0, 1)| in 99 x 8 draws with probability ~1 - 1.6e-6
  EXPECT_LE(falselyFound, static_cast<int>(0.05 * experiments + 4 * std::sqrt(0.05 * 0.95 * experiments)));
}
