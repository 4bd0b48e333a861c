#include "neuromkl/metrics/comparison.hpp"


#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "midranks.hpp"

namespace neuromkl::metrics {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// DeLong's structural components of one model: V10 per positive (the fraction of negatives it outranks) and V01 per
/// negative (the fraction of positives that outrank it), from midranks: V10_i = (R_i - R^X_i) / n, V01_j = 1 - (R_j -
/// R^Y_j) / m, R the rank among all subjects, R^X / R^Y the rank among the positives / negatives (Sun & Xu 2014).
struct Components {
  std::vector<double> v10, v01;
  double auc = 0;
};

Components StructuralComponents(const std::vector<double>& scores, const std::vector<char>& positive) {
  if (scores.size() != positive.size()) throw std::invalid_argument("DeLong: one class flag per score");
  std::vector<double> x, y;
  for (std::size_t i = 0; i < scores.size(); ++i) (positive[i] ? x : y).push_back(scores[i]);
  if (x.empty() || y.empty()) throw std::invalid_argument("DeLong: both classes needed");
  const auto m = static_cast<double>(x.size()), n = static_cast<double>(y.size());
  const std::vector<double> all = Midranks(scores.data(), scores.size()), rx = Midranks(x.data(), x.size()), ry = Midranks(y.data(), y.size());
  Components c;
  std::size_t ix = 0, iy = 0;
  for (std::size_t i = 0; i < scores.size(); ++i) {
    if (positive[i]) {
      c.v10.push_back((all[i] - rx[ix++]) / n);
    } else {
      c.v01.push_back(1.0 - (all[i] - ry[iy++]) / m);
    }
  }
  c.auc = std::accumulate(c.v10.begin(), c.v10.end(), 0.0) / m;
  return c;
}

double Covariance(const std::vector<double>& a, const std::vector<double>& b) {
  const auto k = static_cast<double>(a.size());
  if (a.size() < 2) return 0.0;
  const double ma = std::accumulate(a.begin(), a.end(), 0.0) / k, mb = std::accumulate(b.begin(), b.end(), 0.0) / k;
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += (a[i] - ma) * (b[i] - mb);
  return s / (k - 1);
}

double NormalTwoSidedP(double z) { return std::erfc(std::abs(z) / std::sqrt(2.0)); }

}  // namespace

AucVariance DeLongAuc(const std::vector<double>& scores, const std::vector<char>& positive) {
  const Components c = StructuralComponents(scores, positive);
  return {c.auc, Covariance(c.v10, c.v10) / static_cast<double>(c.v10.size()) + Covariance(c.v01, c.v01) / static_cast<double>(c.v01.size())};
}

PairedAucTest DeLongPairedTest(const std::vector<double>& scoresA, const std::vector<double>& scoresB, const std::vector<char>& positive) {
  if (scoresA.size() != scoresB.size()) throw std::invalid_argument("DeLong: the two models must score the same subjects");
  const Components a = StructuralComponents(scoresA, positive), b = StructuralComponents(scoresB, positive);
  const auto m = static_cast<double>(a.v10.size()), n = static_cast<double>(a.v01.size());
  PairedAucTest t;
  t.aucA = a.auc;
  t.aucB = b.auc;
  t.varianceA = Covariance(a.v10, a.v10) / m + Covariance(a.v01, a.v01) / n;
  t.varianceB = Covariance(b.v10, b.v10) / m + Covariance(b.v01, b.v01) / n;
  t.covariance = Covariance(a.v10, b.v10) / m + Covariance(a.v01, b.v01) / n;
  const double variance = t.varianceA + t.varianceB - 2 * t.covariance;
  if (!(variance > 1e-300)) {
    t.z = kNaN;
    t.p = t.aucA == t.aucB ? 1.0 : kNaN;
    return t;
  }
  t.z = (t.aucA - t.aucB) / std::sqrt(variance);
  t.p = NormalTwoSidedP(t.z);
  return t;
}

double McNemarExactP(std::int64_t onlyA, std::int64_t onlyB) {
  if (onlyA < 0 || onlyB < 0) throw std::invalid_argument("McNemar: counts must be >= 0");
  const std::int64_t n = onlyA + onlyB, k = std::min(onlyA, onlyB);
  if (n == 0) return 1.0;
  // P(X <= k) for X ~ Binomial(n, 1/2): the terms C(n, i) 2^-n by their ratio (n - i) / (i + 1), from 2^-n exactly;
  // beyond n = 1000 (2^-n underflows near 1074) from log-gamma.
  double tail = 0;
  if (n <= 1000) {
    double term = std::ldexp(1.0, static_cast<int>(-n));
    for (std::int64_t i = 0; i <= k; ++i) {
      tail += term;
      term *= static_cast<double>(n - i) / static_cast<double>(i + 1);
    }
  } else {
    for (std::int64_t i = 0; i <= k; ++i)
      tail += std::exp(std::lgamma(static_cast<double>(n) + 1) - std::lgamma(static_cast<double>(i) + 1) - std::lgamma(static_cast<double>(n - i) + 1) -
                       static_cast<double>(n) * std::log(2.0));
  }
  return std::min(1.0, 2 * tail);
}

double RegularisedIncompleteBeta(double x, double a, double b) {
  if (!(x >= 0 && x <= 1) || !(a > 0) || !(b > 0)) return kNaN;
  if (x == 0 || x == 1) return x;
  // The continued fraction converges fast for x < (a + 1) / (a + b + 2); otherwise use I_x(a, b) = 1 - I_{1-x}(b, a).
  if (x > (a + 1) / (a + b + 2)) return 1.0 - RegularisedIncompleteBeta(1 - x, b, a);
  const double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x)) / a;
  // Lentz's method on 1 / (1 + d1 / (1 + d2 / (1 + ...))), d_{2k+1} = -(a+k)(a+b+k) x / ((a+2k)(a+2k+1)),
  // d_{2k} = k (b-k) x / ((a+2k-1)(a+2k)).
  const double tiny = 1e-300;
  double f = 1, c = 1, d = 0;
  for (int i = 0; i <= 400; ++i) {
    const int k = i / 2;
    double numerator;
    if (i == 0) {
      numerator = 1;
    } else if (i % 2 == 0) {
      numerator = k * (b - k) * x / ((a + 2 * k - 1) * (a + 2 * k));
    } else {
      numerator = -(a + k) * (a + b + k) * x / ((a + 2 * k) * (a + 2 * k + 1));
    }
    d = 1 + numerator * d;
    if (std::abs(d) < tiny) d = tiny;
    d = 1 / d;
    c = 1 + numerator / c;
    if (std::abs(c) < tiny) c = tiny;
    const double step = c * d;
    f *= step;
    if (std::abs(1 - step) < 1e-15) return front * (f - 1);
  }
  return front * (f - 1);
}

double StudentTwoSidedP(double t, double df) {
  if (!std::isfinite(t) || !(df > 0)) return std::isinf(t) && df > 0 ? 0.0 : kNaN;
  return RegularisedIncompleteBeta(df / (df + t * t), df / 2, 0.5);
}

ResampledTTest CorrectedResampledTTest(const std::vector<double>& differences, double testSize, double trainSize) {
  ResampledTTest r;
  const auto J = static_cast<double>(differences.size());
  if (differences.size() < 2 || !(trainSize > 0)) {
    r.t = r.p = kNaN;
    return r;
  }
  r.meanDifference = std::accumulate(differences.begin(), differences.end(), 0.0) / J;
  double ss = 0;
  for (double d : differences) ss += (d - r.meanDifference) * (d - r.meanDifference);
  // Equal differences leave only rounding in s^2: treat a spread below 1e-10 of the mean difference as none.
  const double variance = ss / (J - 1) <= 1e-20 * r.meanDifference * r.meanDifference ? 0.0 : ss / (J - 1);
  r.degreesOfFreedom = static_cast<int>(differences.size()) - 1;
  const double scale = (1.0 / J + testSize / trainSize) * variance;
  if (!std::isfinite(scale)) {  // a NaN difference
    r.t = r.p = kNaN;
    return r;
  }
  if (!(scale > 0)) {  // every fold differs by the same amount: no difference is p = 1, any other has no defined t
    r.t = r.meanDifference == 0 ? 0.0 : kNaN;
    r.p = r.meanDifference == 0 ? 1.0 : kNaN;
    return r;
  }
  r.t = r.meanDifference / std::sqrt(scale);
  r.p = StudentTwoSidedP(r.t, r.degreesOfFreedom);
  return r;
}

}  // namespace neuromkl::metrics
