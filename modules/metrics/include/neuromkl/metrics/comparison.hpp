#pragma once
// Tests that compare two models evaluated on the same subjects and folds, and intervals of a single model's AUC:
// DeLong's AUC variance and paired test, McNemar's exact test, the corrected resampled t-test, and the Student t
// distribution they need.
#include <cstdint>
#include <vector>

namespace neuromkl::metrics {

/// The AUC of `scores` (higher = more positive) for subjects with `positive[i]` and its DeLong variance (DeLong,
/// DeLong & Clarke-Pearson 1988), computed with midranks (Sun & Xu 2014); ties count 1/2.
struct AucVariance {
  double auc = 0, variance = 0;
};
AucVariance DeLongAuc(const std::vector<double>& scores, const std::vector<char>& positive);

/// DeLong's test of two correlated AUCs (two models' scores of the same subjects): z = (A - B) / sqrt(var A + var B -
/// 2 cov AB), two-sided normal p. NaN z and p when the difference's variance is 0 (e.g. identical scores: p = 1 then).
struct PairedAucTest {
  double aucA = 0, aucB = 0, varianceA = 0, varianceB = 0, covariance = 0, z = 0, p = 1;
};
PairedAucTest DeLongPairedTest(const std::vector<double>& scoresA, const std::vector<double>& scoresB, const std::vector<char>& positive);

/// McNemar's exact test (two-sided binomial on the discordant pairs): `onlyA` subjects right by A only, `onlyB` by B
/// only; p = min(1, 2 P(X <= min(onlyA, onlyB))), X ~ Binomial(onlyA + onlyB, 1/2); 1 without discordant pairs.
double McNemarExactP(std::int64_t onlyA, std::int64_t onlyB);

/// The corrected resampled t-test (Nadeau & Bengio 2003) of per-fold differences d_j (j = 1..J, folds x repeats):
/// t = mean(d) / sqrt((1/J + testSize/trainSize) s^2), J - 1 degrees of freedom, two-sided p. The correction
/// testSize/trainSize accounts for the overlap of training sets, which makes the plain paired t-test far too liberal.
/// NaN t and p for a NaN difference, or for equal non-zero differences in every fold (no variance).
struct ResampledTTest {
  double meanDifference = 0, t = 0, p = 1;
  int degreesOfFreedom = 0;
};
ResampledTTest CorrectedResampledTTest(const std::vector<double>& differences, double testSize, double trainSize);

/// Two-sided p of Student's t with `df` degrees of freedom: P(|T| >= |t|) = I_{df/(df+t^2)}(df/2, 1/2).
double StudentTwoSidedP(double t, double df);

/// The regularised incomplete beta function I_x(a, b) (continued fraction, Lentz's method).
double RegularisedIncompleteBeta(double x, double a, double b);

}  // namespace neuromkl::metrics
