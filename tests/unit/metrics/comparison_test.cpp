// Comparing two models: DeLong's AUC variance and paired test against hand-derived cases and a direct O(m n)
// transcription of DeLong et al. (1988); McNemar's exact p against the binomial by hand; the corrected resampled
// t-test (Nadeau & Bengio 2003) and Student's t against closed forms (1 and 2 degrees of freedom); calibration on null data.
#include "neuromkl/metrics/comparison.hpp"

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace metrics = neuromkl::metrics;

namespace {

/// DeLong et al. (1988), transcribed directly: psi(x, y) = 1, 1/2, 0; V10_i = mean_j psi(X_i, Y_j); V01_j = mean_i
/// psi(X_i, Y_j); S10_ab = cov over positives of V10^a, V10^b; S01 likewise; var = S10/m + S01/n.
struct Direct {
  std::vector<double> v10, v01;
};
Direct DirectComponents(const std::vector<double>& s, const std::vector<char>& positive) {
  std::vector<double> x, y;
  for (std::size_t i = 0; i < s.size(); ++i) (positive[i] ? x : y).push_back(s[i]);
  Direct d{std::vector<double>(x.size(), 0), std::vector<double>(y.size(), 0)};
  for (std::size_t i = 0; i < x.size(); ++i)
    for (std::size_t j = 0; j < y.size(); ++j) {
      const double psi = x[i] > y[j] ? 1.0 : x[i] == y[j] ? 0.5 : 0.0;
      d.v10[i] += psi / static_cast<double>(y.size());
      d.v01[j] += psi / static_cast<double>(x.size());
    }
  return d;
}
double Cov(const std::vector<double>& a, const std::vector<double>& b) {
  double ma = 0, mb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ma += a[i] / static_cast<double>(a.size());
    mb += b[i] / static_cast<double>(b.size());
  }
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += (a[i] - ma) * (b[i] - mb);
  return s / static_cast<double>(a.size() - 1);
}

}  // namespace

TEST(DeLong, ByHand) {
  // Positives 0.9, 0.6; negatives 0.8, 0.1. V10 = {1, 1/2}, V01 = {1/2, 1}: AUC 3/4, var = 0.125/2 + 0.125/2.
  const auto r = metrics::DeLongAuc({0.9, 0.8, 0.6, 0.1}, {1, 0, 1, 0});
  EXPECT_DOUBLE_EQ(r.auc, 0.75);
  EXPECT_DOUBLE_EQ(r.variance, 0.125);
  // A tie between a positive and a negative counts 1/2.
  EXPECT_DOUBLE_EQ(metrics::DeLongAuc({0.5, 0.5}, {1, 0}).auc, 0.5);
  EXPECT_THROW(metrics::DeLongAuc({0.5, 0.4}, {1, 1}), std::invalid_argument);
}

TEST(DeLong, EqualsTheDirectTranscriptionWithTies) {
  std::mt19937_64 rng(2);
  std::uniform_int_distribution<int> level(0, 9);  // many ties
  for (int trial = 0; trial < 50; ++trial) {
    const std::size_t n = 10 + static_cast<std::size_t>(trial);
    std::vector<double> a(n), b(n);
    std::vector<char> positive(n);
    for (std::size_t i = 0; i < n; ++i) {
      positive[i] = static_cast<char>(i % 3 == 0);
      a[i] = level(rng) + (positive[i] ? 2 : 0);
      b[i] = 0.5 * a[i] + level(rng);
    }
    const Direct da = DirectComponents(a, positive), db = DirectComponents(b, positive);
    const double m = static_cast<double>(da.v10.size()), k = static_cast<double>(da.v01.size());
    double aucA = 0;
    for (double v : da.v10) aucA += v / m;
    const auto t = metrics::DeLongPairedTest(a, b, positive);
    EXPECT_NEAR(t.aucA, aucA, 1e-14);
    EXPECT_NEAR(t.varianceA, Cov(da.v10, da.v10) / m + Cov(da.v01, da.v01) / k, 1e-14);
    EXPECT_NEAR(t.varianceB, Cov(db.v10, db.v10) / m + Cov(db.v01, db.v01) / k, 1e-14);
    EXPECT_NEAR(t.covariance, Cov(da.v10, db.v10) / m + Cov(da.v01, db.v01) / k, 1e-14);
    const double z = (t.aucA - t.aucB) / std::sqrt(t.varianceA + t.varianceB - 2 * t.covariance);
    EXPECT_NEAR(t.z, z, 1e-12);
    EXPECT_NEAR(t.p, std::erfc(std::abs(z) / std::sqrt(2.0)), 1e-12);
  }
  // Identical scores: no difference, p = 1.
  EXPECT_DOUBLE_EQ(metrics::DeLongPairedTest({0.1, 0.7, 0.3}, {0.1, 0.7, 0.3}, {0, 1, 1}).p, 1.0);
}

// Two models of equal, independent quality on null data: the test rejects at about its nominal rate.
TEST(DeLong, PairedTestHoldsItsLevelOnNullData) {
  std::mt19937_64 rng(8);
  std::normal_distribution<double> normal;
  const int experiments = 4000, n = 200;
  int rejected = 0;
  for (int e = 0; e < experiments; ++e) {
    std::vector<double> a(n), b(n);
    std::vector<char> positive(n);
    for (int i = 0; i < n; ++i) {
      positive[static_cast<std::size_t>(i)] = static_cast<char>(i % 2);
      const double shared = normal(rng);
      a[static_cast<std::size_t>(i)] = (i % 2) * 0.8 + shared + normal(rng);
      b[static_cast<std::size_t>(i)] = (i % 2) * 0.8 + shared + normal(rng);
    }
    rejected += metrics::DeLongPairedTest(a, b, positive).p <= 0.05;
  }
  // Asymptotic test: 5 % within 4 binomial SDs (0.0034 each) plus a small allowance for n = 200.
  EXPECT_NEAR(static_cast<double>(rejected) / experiments, 0.05, 0.016);
}

// DeLong's interval AUC +- 1.96 SE covers the true AUC of a binormal model, Phi(delta / sqrt(2)), about 95 % of the time.
TEST(DeLong, IntervalCoversTheTrueAucAtAboutTheNominalRate) {
  std::mt19937_64 rng(21);
  std::normal_distribution<double> normal;
  const double delta = 1.0, truth = 0.5 * std::erfc(-delta / 2.0);  // Phi(delta / sqrt(2))
  const int experiments = 2000, n = 150;
  int covered = 0;
  for (int e = 0; e < experiments; ++e) {
    std::vector<double> s(n);
    std::vector<char> positive(n);
    for (int i = 0; i < n; ++i) {
      positive[static_cast<std::size_t>(i)] = static_cast<char>(i < n / 3);
      s[static_cast<std::size_t>(i)] = normal(rng) + (i < n / 3 ? delta : 0.0);
    }
    const auto a = metrics::DeLongAuc(s, positive);
    covered += std::abs(a.auc - truth) <= 1.959963984540054 * std::sqrt(a.variance);
  }
  // Asymptotic: 95 % within 4 binomial SDs (0.0049 each) and a small allowance for n = 150.
  EXPECT_NEAR(static_cast<double>(covered) / experiments, 0.95, 0.025);
}

TEST(McNemar, ExactBinomialByHand) {
  // 1 vs 5 discordant: P(X <= 1) = (1 + 6) / 64 for X ~ Bin(6, 1/2); two-sided 14 / 64.
  EXPECT_DOUBLE_EQ(metrics::McNemarExactP(1, 5), 14.0 / 64);
  EXPECT_DOUBLE_EQ(metrics::McNemarExactP(5, 1), 14.0 / 64);
  EXPECT_DOUBLE_EQ(metrics::McNemarExactP(3, 3), 1.0);  // capped
  EXPECT_DOUBLE_EQ(metrics::McNemarExactP(0, 0), 1.0);
  EXPECT_NEAR(metrics::McNemarExactP(0, 10), 2.0 / 1024, 1e-15);
  // Large counts: the exact sum, computed in rational arithmetic (Python fractions): 9.564441369189461e-4.
  EXPECT_NEAR(metrics::McNemarExactP(400, 500), 9.564441369189461e-4, 1e-12);
  // Beyond n = 1000 (log-gamma terms): symmetric counts give 1, and 600 vs 700 matches the normal approximation with
  // continuity correction, z = 99 / sqrt(1300), to within its error at this n.
  EXPECT_DOUBLE_EQ(metrics::McNemarExactP(700, 700), 1.0);
  EXPECT_NEAR(metrics::McNemarExactP(600, 700), std::erfc(99 / std::sqrt(1300.0) / std::sqrt(2.0)), 2e-4);
}

TEST(StudentT, ClosedFormsForOneAndTwoDegreesOfFreedom) {
  for (double t : {0.0, 0.3, 1.0, 2.5, 12.0, -4.0}) {
    EXPECT_NEAR(metrics::StudentTwoSidedP(t, 1), 1 - 2 * std::atan(std::abs(t)) / M_PI, 1e-13) << t;   // Cauchy
    EXPECT_NEAR(metrics::StudentTwoSidedP(t, 2), 1 - std::abs(t) / std::sqrt(2 + t * t), 1e-13) << t;
  }
  EXPECT_NEAR(metrics::StudentTwoSidedP(1.959963984540054, 1e7), 0.05, 1e-6);  // the normal limit
  EXPECT_NEAR(metrics::RegularisedIncompleteBeta(0.3, 1, 1), 0.3, 1e-15);
  EXPECT_NEAR(metrics::RegularisedIncompleteBeta(0.3, 3, 1), 0.027, 1e-15);
  EXPECT_NEAR(metrics::RegularisedIncompleteBeta(0.8, 2.5, 4.5) + metrics::RegularisedIncompleteBeta(0.2, 4.5, 2.5), 1.0, 1e-14);
}

TEST(CorrectedResampledTTest, ByHand) {
  // d = 1, 2, 3 with test/train = 1/4: mean 2, s^2 = 1, t = 2 / sqrt((1/3 + 1/4) 1), 2 degrees of freedom.
  const auto r = metrics::CorrectedResampledTTest({1, 2, 3}, 1, 4);
  const double t = 2 / std::sqrt(1.0 / 3 + 0.25);
  EXPECT_DOUBLE_EQ(r.meanDifference, 2);
  EXPECT_NEAR(r.t, t, 1e-14);
  EXPECT_EQ(r.degreesOfFreedom, 2);
  EXPECT_NEAR(r.p, 1 - t / std::sqrt(2 + t * t), 1e-13);
  EXPECT_TRUE(std::isnan(metrics::CorrectedResampledTTest({1}, 1, 4).p));
  EXPECT_DOUBLE_EQ(metrics::CorrectedResampledTTest({0, 0, 0}, 1, 4).p, 1.0);
  EXPECT_TRUE(std::isnan(metrics::CorrectedResampledTTest({0.1, 0.1, 0.1}, 1, 4).p));  // no variance: no t
  EXPECT_TRUE(std::isnan(metrics::CorrectedResampledTTest({0.1, std::nan(""), 0.2}, 1, 4).p));
}
